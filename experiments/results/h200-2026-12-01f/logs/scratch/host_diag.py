"""Scratch: why an eager triton attention call holds the host ~100 us in a sweep job but ~30 us alone."""
import cProfile
import io
import pstats

import torch

from kernels import triton_attention as TA
from kernels import triton_launch
from transformerop.graphs import capture
from transformerop.measure.timing import host_time, measure

B, H, T, D = 64, 6, 256, 64
q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
f = lambda: TA.attention(q, k, v, causal=True, sm_scale=0.125)  # noqa: E731
g = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)
x = torch.randn(1 << 16, device="cuda")
torch_op = lambda: x.mul_(1.0)  # noqa: E731


def report(stage):
    for _ in range(5):
        f()
    print(stage, "| triton fwd host", round(host_time(f, "cuda")["host_us"], 1), "wall",
          round(measure(f, "cuda")["median_ms"] * 1e3, 1), "| torch op host", round(host_time(torch_op, "cuda")["host_us"], 1),
          "| stats", dict(triton_launch.stats), "hook", triton_launch_hooks(), flush=True)


def triton_launch_hooks():
    from triton import knobs
    return (knobs.runtime.launch_enter_hook is not None, knobs.runtime.launch_exit_hook is not None)


report("fresh")
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
    f()
    torch.cuda.synchronize()
report("after torch.profiler")
cap = capture(f)
cap.replay()
report("after a graph capture")
pr = cProfile.Profile()
pr.enable()
for _ in range(300):
    f()
torch.cuda.synchronize()
pr.disable()
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
print(s.getvalue()[:3500], flush=True)
