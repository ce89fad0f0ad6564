"""Tuned Triton configs that travel with the code (kernels/triton_tuned.json).

The attention kernels are autotuned per key (kernels/triton_launch.py), and Triton keeps a choice
on disk, but only on the machine that made it: the first process on a fresh machine compiles and
times every candidate (on the H100 the speedrun's first process with our Triton attention spent
~61 s in its capture doing so). This table holds, per GPU architecture (sm_90 for the H100 and
H200: the same SMs and shared memory), the config the autotuner chose for each key, so such a process compiles
one config per key and launches it. A key not in the table is autotuned (Triton caches the choice on disk).

The table is written by kernels/tune_attention.py, which tunes on the GPU and merges the winners
in here (other entries kept). This module imports no kernel: the launcher reads it.
"""
import functools
import json
import os
from pathlib import Path

import torch

TABLE = Path(__file__).with_name("triton_tuned.json")
enabled = True  # off while tuning (the autotuner must run) and in tests that need it to
CONFIG_FIELDS = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")


@functools.cache
def arch(device) -> str:
    """The table's section for a device: sm_XY for a CUDA GPU, else the device type."""
    if device.type != "cuda":
        return device.type
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def entry(key) -> str:
    """A tuning key (kernel, device, dtype, Tq, Tk and B*H buckets, D, causal, precision, dropout)
    as the table names it, the device aside (the section names that)."""
    kernel, _, dtype, *rest = key
    return "|".join([kernel, str(dtype).removeprefix("torch."), *map(str, rest)])


@functools.cache
def _read(path: str) -> dict:
    return json.loads(Path(path).read_text()) if Path(path).exists() else {}


def lookup(key, path: Path | None = None) -> dict | None:
    """The shipped config for `key` on its device's architecture, or None (then it is tuned)."""
    if not enabled:
        return None
    row = _read(str(path or TABLE)).get(arch(key[1]), {}).get(entry(key))
    return None if row is None else {f: row[f] for f in CONFIG_FIELDS}


def record(tuned: dict, path: Path | None = None) -> dict:
    """Merge `tuned` (tuning key -> config, as kernels/triton_launch.py keeps them) into the table,
    each row naming the GPU that chose it; rows of other keys and architectures stay. Returns the
    rows written, by section."""
    path = Path(path or TABLE)
    table = json.loads(path.read_text()) if path.exists() else {}
    written = {}
    for key, cfg in tuned.items():
        row = {f: int(cfg[f]) for f in CONFIG_FIELDS}
        row["gpu"] = torch.cuda.get_device_name(key[1]) if key[1].type == "cuda" else key[1].type
        written.setdefault(arch(key[1]), {})[entry(key)] = row
    for section, rows in written.items():
        table.setdefault(section, {}).update(rows)
        table[section] = dict(sorted(table[section].items()))
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(dict(sorted(table.items())), indent=1) + "\n")
    os.replace(tmp, path)  # a reader sees the old table or the new one, never half of one
    _read.cache_clear()
    return written

