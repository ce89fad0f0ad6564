"""A cold Triton cache: the fused norm's seven specializations (the speedrun's four forward -- the
embedding's and a block's, with and without dropout -- and three backward) compiled and first
launched one after another (seq) or from seven threads at once (par). Run each mode in a fresh
process with an empty TRITON_CACHE_DIR. Prints the wall time and each kernel's own."""
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from kernels.triton_norm import _add_norm_bwd, _add_norm_fwd

dev, C, n = "cuda", 384, 64
f32, bf16 = torch.float32, torch.bfloat16


def t(dtype, *shape):
    return torch.zeros(*shape, device=dev, dtype=dtype)


seed = torch.zeros(1, device=dev, dtype=torch.int64)
w, mean, rstd = t(f32, C), t(f32, n), t(f32, n)


def fwd(x_dtype, br_dtype, res, drop):
    br, x = t(br_dtype, n, C), t(x_dtype, n, C)
    _add_norm_fwd[(n // 4,)](x if res else br, br, t(f32, n, C), t(bf16, n, C), w, w, mean, rstd, seed, 100, 1.25,
                             n, C, 1e-5, HAS_RES=res, HAS_BIAS=False, DROPOUT=drop, ROWS=4, BLOCK_C=512)


def bwd(dh, res, dbr_dtype):
    dy = t(bf16, n, C)
    _add_norm_bwd[(n // 8,)](dy, t(f32, n, C) if dh else dy, t(f32, n, C), w, mean, rstd, t(f32, n, C),
                             t(dbr_dtype, n, C), t(f32, n // 8, C), t(f32, n // 8, C), seed, 100, 1.25, n, C, 8,
                             HAS_DH=dh, HAS_RES=res, HAS_BIAS=False, DROPOUT=True, ROWS=2, BLOCK_C=512, num_warps=2)


jobs = [lambda: fwd(f32, f32, False, True), lambda: fwd(f32, f32, False, False), lambda: fwd(f32, bf16, True, True),
        lambda: fwd(f32, bf16, True, False), lambda: bwd(True, False, f32), lambda: bwd(True, True, bf16),
        lambda: bwd(False, True, bf16)]


def timed(job):
    t0 = time.perf_counter()
    job()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


torch.cuda.synchronize()
t0 = time.perf_counter()
if sys.argv[1] == "seq":
    each = [timed(j) for j in jobs]
else:
    with ThreadPoolExecutor(len(jobs)) as pool:
        each = list(pool.map(timed, jobs))
print(f"COMPILE {sys.argv[1]}: {time.perf_counter() - t0:.2f} s for {len(jobs)} kernels; each "
      + ", ".join(f"{s:.2f}" for s in each), flush=True)
