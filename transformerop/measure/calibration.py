"""This machine's ceilings: matmul FLOP/s per dtype, copy bandwidth, per-kernel launch cost
(eager and inside a CUDA graph), and the host cost per kernel inside model code (op_*_us).
`task=calibrate` measures them and stores them here, one JSON file per device name; predictions
read them back. Where nothing was measured, labelled fallbacks fill in: datasheet peaks for known
GPUs, a conservative guess for a CPU. Every value carries its
source, and every prediction reports which one it used.

Cache location: $TRANSFORMEROP_CALIBRATION_DIR, else the user's cache directory
(platformdirs: ~/.cache/transformerop/calibration/<device>.json on Linux) -- a property of the
machine, shared by every checkout on it.
"""
import json
import os
import platform
import re
import time
from pathlib import Path

import platformdirs
import torch

# launch_us: one bare eager op (the floor). op_train_us / op_infer_us: host time per kernel inside
# model code -- module dispatch, autocast casts, autograd recording and the backward engine, AdamW
# -- what a host-bound (launch-bound) eager step really pays per kernel; predictions use these.
KEYS = ("flops_fp32", "flops_tf32", "flops_bf16", "bandwidth", "launch_us", "graph_node_us",
        "op_train_us", "op_infer_us")
UNITS = {"flops_fp32": "FLOP/s", "flops_tf32": "FLOP/s", "flops_bf16": "FLOP/s", "bandwidth": "B/s",
         "launch_us": "us", "graph_node_us": "us", "op_train_us": "us", "op_infer_us": "us"}

# Dense (no sparsity) peaks from the vendors' datasheets (SXM parts). Launch costs are not on any
# datasheet: they are typical values, labelled as such.
_TYPICAL_LAUNCH = {"launch_us": 10.0, "graph_node_us": 1.5, "op_train_us": 30.0, "op_infer_us": 20.0}
DATASHEET = {
    "H200": {"flops_bf16": 989e12, "flops_tf32": 494e12, "flops_fp32": 67e12, "bandwidth": 4.8e12},
    "H100": {"flops_bf16": 989e12, "flops_tf32": 494e12, "flops_fp32": 67e12, "bandwidth": 3.35e12},
    "A100": {"flops_bf16": 312e12, "flops_tf32": 156e12, "flops_fp32": 19.5e12, "bandwidth": 2.04e12},
}
# Unknown GPU: A100 numbers (a conservative modern part). CPU: a guess for a few AVX2 cores with
# bf16 emulated (slower than fp32) and one memory channel; per-op dispatch ~10 us.
# (Seen on the H200: eager add_ 8.35 us, graph node 1.25 us; in model code ~20 us per kernel for
# an fp32 no-grad forward and ~30-40 us for a train step -- hence the typical op_* values.)
_CPU_GUESS = {"flops_fp32": 1e11, "flops_tf32": 1e11, "flops_bf16": 5e10, "bandwidth": 1e10,
              "launch_us": 10.0, "op_train_us": 10.0, "op_infer_us": 10.0}


def device_name(device) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{device.type} {model}".strip()


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "device"


def cache_path(device) -> Path:
    root = os.environ.get("TRANSFORMEROP_CALIBRATION_DIR") or Path(platformdirs.user_cache_dir("transformerop")) / \
        "calibration"
    return Path(root).expanduser() / f"{_slug(device_name(device))}.json"


def datasheet(part: str) -> dict:
    """Ceilings of a GPU we may not have, in load()'s shape: datasheet peaks, typical launches."""
    values = {**DATASHEET[part], **_TYPICAL_LAUNCH}
    ceilings = {k: {"value": v, "source": "datasheet" if k in DATASHEET[part] else "typical",
                    "how": f"{part} datasheet" if k in DATASHEET[part] else "typical launch cost, not measured"}
                for k, v in values.items()}
    return {"device_name": part, "path": "-", "ceilings": ceilings, "source": "datasheet"}


def fallback(device) -> dict:
    """{key: {value, source, how}}: the datasheet table for a known GPU (A100 values, labelled,
    for an unknown one), or the CPU guess."""
    device = torch.device(device)
    if device.type == "cuda":
        name = device_name(device)
        part = next((k for k in DATASHEET if k in name), None)
        ceilings = datasheet(part or "A100")["ceilings"]
        if part is None:
            for entry in ceilings.values():
                entry["how"] = f"unknown GPU {name!r}: A100 values"
        return ceilings
    return {k: {"value": v, "source": "guess", "how": "conservative CPU guess, not measured"}
            for k, v in _CPU_GUESS.items()}


def load(device) -> dict:
    """Ceilings for this device: measured values from the cache over the labelled fallbacks.
    Returns {"device_name", "path", "ceilings": {key: {value, source, how}}, "source"} where the
    top-level source is "measured", "datasheet"/"guess", or "mixed"."""
    path = cache_path(device)
    ceilings = fallback(device)
    cached = {}
    if path.exists():
        try:
            cached = json.loads(path.read_text()).get("ceilings", {})
        except (OSError, ValueError):
            cached = {}  # a corrupt cache is ignored, never trusted
    ceilings.update({k: v for k, v in cached.items() if k in KEYS and v.get("value") is not None})
    na = ("graph_node_us",) if torch.device(device).type == "cuda" else ("graph_node_us", "flops_tf32")
    sources = {v["source"] for k, v in ceilings.items() if k not in na}  # only what this device can use
    overall = sources.pop() if len(sources) == 1 else "mixed"
    return {"device_name": device_name(device), "path": str(path), "ceilings": ceilings, "source": overall}


def save(device, measured: dict) -> Path:
    """Merge {key: (value, how)} into this device's cache file as source=measured."""
    path = cache_path(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        old = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        old = {}
    ceilings = old.get("ceilings", {})
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    for key, (value, how) in measured.items():
        if key not in KEYS:
            raise KeyError(f"unknown ceiling {key!r}: one of {KEYS}")
        ceilings[key] = {"value": value, "source": "measured", "how": how, "when": stamp}
    record = {"device_name": device_name(device), "torch": torch.__version__, "ceilings": ceilings}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(path)
    return path


def tf32_enabled(device) -> bool:
    return torch.device(device).type == "cuda" and torch.backends.cuda.matmul.allow_tf32


def flops_key(dtype_name: str, device, tf32: bool | None = None) -> str:
    """Which matmul peak a run in this dtype can reach: bf16, TF32 (fp32 with TF32 on), fp32.
    tf32: the kernel's own choice (our Triton attention uses TF32 whatever torch's flag says)."""
    if dtype_name == "bfloat16":
        return "flops_bf16"
    on = tf32_enabled(device) if tf32 is None else tf32 and torch.device(device).type == "cuda"
    return "flops_tf32" if on else "flops_fp32"


def value(cal: dict, key: str):
    entry = cal["ceilings"].get(key)
    return (entry["value"], entry["source"]) if entry else (None, "n/a")
