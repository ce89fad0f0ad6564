"""Scratch: host time and wall time per call, SDPA vs our attention through the Python path and
through the C++ op, forward (grad on) and forward+backward; bf16, causal."""
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from kernels import triton_attention as TA
from kernels import triton_attention_op as op
from transformerop.measure.timing import host_time, measure

t0 = time.perf_counter()
op.load()
print("op load s", round(time.perf_counter() - t0, 2), op.cuda_build.build_info(op.EXTENSION), flush=True)


def steady_host(fn, n=10, repeats=7):
    """Host µs per call over n back-to-back calls queued behind a sleeping kernel (none waits)."""
    out = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(3e8))
        mark = torch.cuda.Event()
        mark.record()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t
        if not mark.query():
            out.append(dt / n * 1e6)
    torch.cuda.synchronize()
    return statistics.median(out) if out else None


rows = []
for (T, D) in [(256, 64), (1024, 64), (256, 128), (2048, 128)]:
    B, H = 64, 6 if D == 64 else 6
    q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3))
    do = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)
    s = D ** -0.5
    fns = {
        "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "ours_python": lambda q, k, v: TA.attention(q, k, v, causal=True, sm_scale=s),
        "ours_cpp": lambda q, k, v: op.attention(q, k, v, True, s, True, 0.0, None),
    }
    for name, f in fns.items():
        cases = {"fwd": lambda: f(q, k, v), "fwd_bwd": lambda: torch.autograd.grad(f(q, k, v), (q, k, v), do)}
        for kind, fn in cases.items():
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            h = host_time(fn, "cuda")["host_us"]
            w = measure(fn, "cuda")["median_ms"] * 1e3
            st = steady_host(fn)
            row = dict(T=T, D=D, name=name, kind=kind, host_us=h, steady_host_us=st, wall_us=w)
            rows.append(row)
            print(json.dumps(row), flush=True)
print("op stats", op.stats())
json.dump(rows, open(sys.argv[1], "w"), indent=1)
