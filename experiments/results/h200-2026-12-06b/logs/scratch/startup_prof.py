"""The main thread's start-up under cProfile: run.py as `python run.py ...` runs it, the profile
stopped and written at the first train step's end (clock.end_startup), then the job goes on.
The warm-up threads (transformerop/cuda_early.py), which cProfile does not see, are timed on the
job's clock: each part's start and end, seconds from the process launch."""
import cProfile
import os
import runpy
import sys
import time

from transformerop import clock, cuda_early

prof = cProfile.Profile()
_end = clock.end_startup
spans = []


def timed(name, fn):
    def wrapper(*args, **kwargs):
        t0 = time.time() - clock.process_start()
        try:
            return fn(*args, **kwargs)
        finally:
            spans.append((name, t0, time.time() - clock.process_start()))
    return wrapper


def warm(gpu):  # cuda_early._warm's two parts, timed apart
    import torch
    import torch.nn.functional as F
    with torch.cuda.device(gpu):
        dtype = torch.bfloat16
        x = torch.ones(1, 1, 64, 64, device=f"cuda:{gpu}", dtype=dtype, requires_grad=True)
        timed("warm: cuBLAS fwd+bwd", lambda: ((x[0, 0] @ x[0, 0]).sum().backward(), torch.cuda.synchronize()))()
        timed("warm: SDPA fwd+bwd", lambda: (F.scaled_dot_product_attention(x, x, x, is_causal=True).sum().backward(),
                                            torch.cuda.synchronize()))()


def end_startup():
    t = _end()
    prof.disable()
    prof.dump_stats(os.environ["OUT"] + "/startup.prof")
    for name, a, b in spans:
        print(f"span {name:32s} {a:6.3f} -> {b:6.3f} s ({b - a:.3f})", flush=True)
    return t


clock.end_startup = end_startup
cuda_early._init = timed("driver init + primary context", cuda_early._init)
cuda_early._warm = timed("warm thread (all)", warm)
cuda_early._launch_all = timed("kernel warm-ups (all)", cuda_early._launch_all)
cuda_early.settle = timed("main: settle()", cuda_early.settle)
sys.argv = ["run.py", *sys.argv[1:]]
prof.enable()
runpy.run_path("run.py", run_name="__main__")
