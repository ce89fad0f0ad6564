"""Tune our Triton attention at given shapes on this GPU and merge the winners into the shipped
table (kernels/triton_tuned.json, read at launch by kernels/triton_launch.py):

    python -m kernels.tune_attention 64,6,256,64 --dropout 0.2      # the seed GPT's training step
    python -m kernels.tune_attention 512,6,256,64 --forward-only    # its whole-split eval
"""
import argparse
import logging
from pathlib import Path

import torch

from kernels import triton_attention as ta
from kernels import triton_launch, triton_tuned

log = logging.getLogger(__name__)


def tune(shape, dtype=torch.bfloat16, dropout=0.0, backward=True) -> None:
    """Run the attention once at (B, H, T, D), causal, q, k, v laid out as the model's c_attn
    heads (views of one (B, T, 3, H, D) buffer): its kernels are autotuned on their first call."""
    B, H, T, D = shape
    qkv = torch.randn(B, T, 3, H, D, device="cuda", dtype=dtype, requires_grad=backward)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    with torch.set_grad_enabled(backward):
        out = ta.attention(q, k, v, dropout_p=dropout, seed=0 if dropout else None)
        if backward:
            out.backward(torch.randn_like(out))
    torch.cuda.synchronize()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m kernels.tune_attention", description=__doc__.split("\n\n")[0])
    p.add_argument("shapes", nargs="+", help="B,H,T,D (causal attention, as the model runs it)")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--dropout", type=float, default=0.0, help="attention dropout (its kernels differ: tune both)")
    p.add_argument("--forward-only", action="store_true", help="an eval's shape: no backward to tune")
    p.add_argument("--table", type=Path, default=triton_tuned.TABLE)
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
    triton_tuned.enabled = False  # the autotuner must run
    triton_launch._tuned.clear()
    for shape in shapes:
        tune(shape, getattr(torch, args.dtype), args.dropout, not args.forward_only)
    for section, rows in triton_tuned.record(triton_launch._tuned, args.table).items():
        for name, row in rows.items():
            log.info(f"{args.table.name} [{section}] {name}: {row}")


if __name__ == "__main__":
    main()
