"""Start-up A/B without editing the tree: `python startup_ab.py <variant> run.py's args...` runs
run.py as a user would, with the variant's change patched in, prints launch -> first step by phase
and exits there (the rest of the job is not needed for the number). Variants:
  base      the tree as it is
  warmup1   the train step's capture warms up once instead of graphs.WARMUP (3) times
  nosdpa    cuda_early's warm-up thread makes no SDPA (cuDNN) call, only the cuBLAS one
  both      warmup1 and nosdpa"""
import os
import runpy
import sys

from transformerop import clock, cuda_early, graphs

variant = sys.argv.pop(1)
if variant in ("warmup1", "both"):
    graphs.capture.__defaults__ = (1, None, None)
if variant in ("nosdpa", "both"):
    def _warm(gpu):
        import torch
        with torch.cuda.device(gpu):
            x = torch.ones(64, 64, device=f"cuda:{gpu}", dtype=torch.bfloat16, requires_grad=True)
            (x @ x).sum().backward()
            torch.cuda.synchronize()
    cuda_early._warm = _warm
_end = clock.end_startup


def end_startup():
    t = _end()
    phases = ", ".join(f"{k} {v:.3f}" for k, v in clock.phases().items())
    print(f"AB {variant:8s} startup {t:.3f} s: {phases}", flush=True)
    os._exit(0)


clock.end_startup = end_startup
sys.argv = ["run.py", *sys.argv[1:]]
runpy.run_path("run.py", run_name="__main__")
