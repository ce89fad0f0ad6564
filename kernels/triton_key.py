"""Triton's own cache key, remembered across processes.

Every kernel Triton finds in its on-disk cache is looked up under a key that starts with
`triton_key()`: a sha256 over Triton's compiler sources and its ~500 MB libtriton. A fresh
process computes it at its first kernel launch, 0.3 s on the H200 host, on the start-up clock of
every job that uses a Triton kernel. Here the key is kept beside Triton's cache, with the size and
mtime of every file it hashes: while none of them changed, a new process reads the key instead of
re-hashing; any change (an upgrade, a rebuilt libtriton) recomputes it. The value is Triton's own,
so the kernels it finds are the ones Triton itself would find.

Imported by the modules that launch Triton kernels; importing it installs the remembered key.
"""
import contextlib
import functools
import hashlib
import json
import os
import sys
from pathlib import Path

import triton
import triton.runtime.cache as _cache

_original = getattr(_cache.triton_key, "_computed_by", _cache.triton_key)  # a re-import keeps the real one


def _hashed_files() -> list:
    """What triton_key() reads (the cache module, the compiler, backends and language sources,
    libtriton), and more: every .py file under those folders."""
    root = Path(triton.__file__).parent
    files = [Path(_cache.__file__)]
    files += sorted(p for part in ("compiler", "backends", "language") for p in (root / part).rglob("*.py"))
    files += sorted((root / "_C").glob("libtriton.*"))
    return files


def _stamp() -> str:
    """Triton's version and the size and mtime of every file the key hashes."""
    stats = [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in _hashed_files()]
    return hashlib.sha256(json.dumps([triton.__version__, stats]).encode()).hexdigest()


def store(stamp: str) -> Path:
    """Beside Triton's kernel cache, one file per installation (its stamp): two installations that
    share a cache keep a key each instead of overwriting each other's."""
    knobs = getattr(triton, "knobs", None)
    root = getattr(getattr(knobs, "cache", None), "dir", None) or os.environ.get("TRITON_CACHE_DIR") \
        or Path.home() / ".triton" / "cache"
    return Path(root) / f"transformerop_triton_key_{stamp[:16]}.json"


@functools.lru_cache()
def remembered_key() -> str:
    """Triton's key, read from the store while the files it hashes are unchanged, else computed
    (and stored); anything unreadable or unwritable falls back to Triton's own computation."""
    try:
        stamp = _stamp()
        path = store(stamp)
        saved = json.loads(path.read_text()) if path.exists() else {}
        if saved.get("stamp") == stamp:
            return saved["key"]
    except (OSError, RuntimeError, ValueError, KeyError, AttributeError):
        return _original()
    key = _original()
    tmp = path.with_name(f"{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"stamp": stamp, "key": key}))
        os.replace(tmp, path)  # atomic: a process beside this one reads the old file or the new one
    except OSError:  # a read-only cache: every process computes the key, as Triton alone would
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return key


remembered_key._computed_by = _original


def install() -> None:
    """Every Triton module holding triton_key (the cache, the autotuner, ...) gets the remembered one."""
    for module_name, module in list(sys.modules.items()):
        if module_name.partition(".")[0] == "triton" and getattr(module, "triton_key", None) is _original:
            module.triton_key = remembered_key


install()
