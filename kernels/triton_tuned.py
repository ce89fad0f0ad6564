"""Tuned Triton configs that travel with the code (kernels/triton_tuned.json).

The attention kernels are autotuned per key (kernels/triton_launch.py), and Triton keeps a choice
on disk, but only on the machine that made it: the first process on a fresh machine compiles and
times every candidate (on the H100 the speedrun's first attention=triton process spent ~61 s in its
capture doing so). This table holds, per GPU architecture (sm_90 for the H100 and H200: the same
SMs and shared memory), the config the autotuner chose for each key, so such a process compiles
one config per key and launches it. A key not in the table is tuned as before.

The table is written by tuning here, on the GPU, and merging the winners in (other entries kept):

    python -m kernels.triton_tuned 64,6,256,64 --dropout 0.2      # the seed GPT's training step
    python -m kernels.triton_tuned 512,6,256,64 --forward-only    # its whole-split eval
"""
import argparse
import functools
import json
import logging
import os
from pathlib import Path

import torch

log = logging.getLogger(__name__)

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


def tune(shape, dtype=torch.bfloat16, dropout=0.0, backward=True) -> None:
    """Run the attention once at (B, H, T, D), causal, q, k, v laid out as the model's c_attn
    heads (views of one (B, T, 3, H, D) buffer): its kernels are autotuned on their first call."""
    from kernels import triton_attention as ta
    B, H, T, D = shape
    qkv = torch.randn(B, T, 3, H, D, device="cuda", dtype=dtype, requires_grad=backward)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    with torch.set_grad_enabled(backward):
        out = ta.attention(q, k, v, dropout_p=dropout, seed=0 if dropout else None)
        if backward:
            out.backward(torch.randn_like(out))
    torch.cuda.synchronize()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m kernels.triton_tuned", description=__doc__.split("\n\n")[0])
    p.add_argument("shapes", nargs="+", help="B,H,T,D (causal attention, as the model runs it)")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--dropout", type=float, default=0.0, help="attention dropout (its kernels differ: tune both)")
    p.add_argument("--forward-only", action="store_true", help="an eval's shape: no backward to tune")
    p.add_argument("--table", type=Path, default=TABLE)
    args = p.parse_args(argv)
    shapes = []
    for s in args.shapes:
        try:
            shapes.append(tuple(int(x) for x in s.split(",")))
        except ValueError:
            shapes.append(())
        if len(shapes[-1]) != 4 or min(shapes[-1]) < 1:
            p.error(f"shape {s!r}: give B,H,T,D as four positive integers, e.g. 64,6,256,64")
    if not torch.cuda.is_available():
        p.error("tuning times kernels on a CUDA GPU; none is here")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    global enabled
    enabled = False
    from kernels import triton_launch
    triton_launch._tuned.clear()
    for shape in shapes:
        tune(shape, getattr(torch, args.dtype), args.dropout, not args.forward_only)
    for section, rows in record(triton_launch._tuned, args.table).items():
        for name, row in rows.items():
            log.info(f"{args.table.name} [{section}] {name}: {row}")


if __name__ == "__main__":
    main()
