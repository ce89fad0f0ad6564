"""The attention backward's tiles at the train step's shape (B 64, H 6, T 256, D 64, causal, bf16),
beyond the autotuner's list: each config (query-tile dQ and atomic dQ) is checked against a
float64 reference without dropout first, then timed with dropout 0.2 as the step runs it
(do_bench median and p25-p75 of the backward alone; the forward fixed at the shipped config)."""
import itertools
import math
import os

import torch
from triton.testing import do_bench

from kernels import triton_attention as ta
from kernels.triton_dropout import seed_tensor

torch.manual_seed(0)
B, H, T, D = map(int, os.environ.get("SHAPE", "64,6,256,64").split(","))  # SHAPE=2,2,64,64 for a CPU smoke run
DT = getattr(torch, os.environ.get("DTYPE", "bfloat16"))  # DTYPE=float32 for the CPU smoke run
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: under TRITON_INTERPRET=1, untimed
if DEV == "cpu":
    def do_bench(f, **kw):
        f()
        return [0.0, 0.0, 0.0]
scale = 1.0 / math.sqrt(D)
qkv = torch.randn(B, T, 3, H, D, device=DEV, dtype=DT)
q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # the model's c_attn heads: views
do = torch.randn(B, T, H, D, device=DEV, dtype=DT).transpose(1, 2)


def reference():
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    s = (q64 @ k64.transpose(-1, -2)) * scale
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=DEV).triu(1), float("-inf"))
    (torch.softmax(s, -1) @ v64).backward(do.double())
    return q64.grad, k64.grad, v64.grad


ref = reference()
o0, lse0 = ta._forward(q, k, v, True, scale, True)  # no dropout: the correctness gate's forward
seed = seed_tensor(1234, q.device)
o1, lse1 = ta._forward(q, k, v, True, scale, True, 0.2, seed)  # the step's forward (dropout 0.2)


def err(got):
    return max(((g.double() - r).abs().max() / r.abs().max()).item() for g, r in zip(got, ref))


def row(label, bwd_cfg, mode):
    ta.force_configs = (None, bwd_cfg)
    try:
        e = err(ta._backward(do, q, k, v, o0, lse0, True, scale, True, 0.0, None, mode))
        f = lambda: ta._backward(do, q, k, v, o1, lse1, True, scale, True, 0.2, seed, mode)  # noqa: E731
        med, p25, p75 = do_bench(f, warmup=25, rep=200, quantiles=[0.5, 0.25, 0.75])
        print(f"{label:34s} {mode:11s} err {e:.2e} {'OK ' if e < 2e-2 else 'BAD'} {1e3 * med:7.1f} us "
              f"({1e3 * p25:.1f}-{1e3 * p75:.1f})", flush=True)
    except Exception as ex:  # noqa: BLE001 -- out of shared memory or registers: reported, next
        print(f"{label:34s} {mode:11s} failed: {type(ex).__name__}: {str(ex).splitlines()[0][:90]}", flush=True)
    finally:
        ta.force_configs = None


shipped = dict(BLOCK_M=64, BLOCK_N=16, num_warps=4, num_stages=2)
row("shipped 64x16 w4 s2", shipped, "query_tiles")
# tiles outside the autotuner's list first (its own were timed against each other on the H100)
grid = [(64, 16, 8, 2), (64, 32, 8, 2), (64, 64, 8, 2), (128, 32, 8, 2), (128, 16, 8, 2), (128, 32, 4, 2),
        (128, 64, 4, 2), (64, 16, 4, 3), (64, 32, 8, 3), (128, 32, 8, 3), (32, 32, 4, 2), (128, 16, 4, 2),
        *itertools.product((64, 128), (16, 32, 64), (4, 8), (2, 3))]
grid = list(dict.fromkeys(grid))
for bm, bn, w, s in grid[:int(os.environ.get("CONFIGS", len(grid)))]:
    cfg = dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s)
    row(f"{bm}x{bn} w{w} s{s}", cfg, "query_tiles")
for bm, bn, w, s in ((64, 16, 4, 2), (64, 32, 4, 2), (64, 64, 4, 2), (128, 32, 8, 2), (128, 64, 8, 2))[:int(os.environ.get("CONFIGS", 5))]:
    row(f"{bm}x{bn} w{w} s{s}", dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s), "atomic")
