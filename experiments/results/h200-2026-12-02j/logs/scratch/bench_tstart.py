"""Triton's own start in a fresh process on an empty (or filled) TRITON_CACHE_DIR, by step: the
import, the CUDA driver's utilities (a C module built and loaded), Triton's cache key, then a
trivial kernel's first launch (compile + launcher) and a second trivial kernel's. Wall seconds."""
import time

t0 = time.perf_counter()
import torch  # noqa: E402

torch.zeros(1, device="cuda")
marks = [("torch+cuda", time.perf_counter() - t0)]


def mark(name, since=[time.perf_counter()]):  # noqa: B006
    now = time.perf_counter()
    marks.append((name, now - since[0]))
    since[0] = now


mark("start")
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

mark("import triton")
triton.runtime.driver.active.get_current_target()
triton.runtime.driver.active.utils  # noqa: B018
mark("driver")
from kernels import triton_key  # noqa: E402

triton_key.remembered_key()
mark("triton_key")


@triton.jit
def _one(X, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(X + offs, tl.load(X + offs, mask=offs < n) + 1, mask=offs < n)


@triton.jit
def _two(X, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(X + offs, tl.load(X + offs, mask=offs < n) * 2, mask=offs < n)


x = torch.zeros(64, device="cuda")
_one[(1,)](x, 64, BLOCK=64)
torch.cuda.synchronize()
mark("first kernel")
_two[(1,)](x, 64, BLOCK=64)
torch.cuda.synchronize()
mark("second kernel")
print("TSTART " + ", ".join(f"{k} {v:.3f}" for k, v in marks), flush=True)
