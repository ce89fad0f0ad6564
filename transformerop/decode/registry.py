"""The decode paths: one line each, name -> "module:Class" (imported only when chosen)."""
import importlib

PATHS = {
    "recompute": "transformerop.decode.recompute:Recompute",
    "kv_cache": "transformerop.decode.kv_cache:KVCache",
    "static": "transformerop.decode.static:Static",
    "static_graph": "transformerop.decode.static_graph:StaticGraph",
    "compiled": "transformerop.decode.compiled:Compiled",
    "fused": "transformerop.decode.fused:Fused",
    "persistent": "transformerop.decode.persistent:Persistent",
    "megakernel": "transformerop.decode.megakernel:Megakernel",
}
REFERENCE = "recompute"  # the path every other is checked against (decode/parity.py), and the default


def get_path(name: str):
    if name not in PATHS:
        raise ValueError(f"decode.name={name!r}: choose one of {list(PATHS)}")
    module, cls = PATHS[name].split(":")
    return getattr(importlib.import_module(module), cls)
