"""The GPU side of a timed region: torch.profiler's kernel events, summed per call, step or token,
beside the wall time that measure() took. gpu_busy = kernel time / wall time says what bounds
the region: near 1, the kernels (bandwidth, occupancy); far below, the gaps between them (host
work, launches). Kernel time comes from a separate profiled run, warm (no L2 flush)."""
import logging
import re

import torch
from torch.profiler import ProfilerActivity, profile

from . import timing

log = logging.getLogger(__name__)


def on_device(e) -> bool:
    """A profiler event that ran on the GPU (a kernel, memcpy or memset), not a host op."""
    return str(getattr(e, "device_type", "")).endswith("CUDA")


def summarize(by: dict, per: int) -> dict:
    """{kernel name: [µs of each launch]} over `per` calls, steps or tokens -> kernel_us and
    kernels per unit, and `table`: every kernel, most time first, as [name (NAME characters), µs per
    unit, launches per unit, median µs a launch]. Every kernel, not a top few: at small scale
    the time hides in the tail (the H200's graphed bf16 train step: the kernels outside its top
    ten, 260 of 352 launches a step, held 41% of its kernel time)."""
    total = sum(map(sum, by.values()))
    rows = sorted(by.items(), key=lambda kv: -sum(kv[1]))
    return {"kernel_us": total / per, "kernels": sum(map(len, by.values())) / per,
            "table": [[name[:NAME], sum(d) / per, len(d) / per, sorted(d)[len(d) // 2]] for name, d in rows]}


NAME = 100  # characters of a kernel's name kept: enough to tell cuBLAS's, cuDNN's and torch's apart

# What a kernel is, from its name: the first pattern that matches (torch's, cuBLAS's, cuDNN's and
# this project's names), for a profile told by kind -- where a step's time goes at a glance
KINDS = (
    ("optimizer", re.compile(r"multi_tensor_apply|FusedOptim|adam|NormTwo|lpnorm", re.I)),  # AdamW, the grad clip
    ("random", re.compile(r"distribution_", re.I)),  # torch's random draws (the dropout seeds)
    ("attention", re.compile(r"sdpa|flash|fmha|attention|attn|_fwd_kernel|_bwd_kernel|compute_dot_do_o|convert_dq|"
                             r"philox", re.I)),
    ("matmul", re.compile(r"gemm|nvjet|cutlass|splitKreduce|xmma|cublas|_matmul", re.I)),
    ("norm", re.compile(r"norm|GammaBeta", re.I)),
    ("loss", re.compile(r"nll_loss|softmax|cross_entropy", re.I)),
    ("embedding", re.compile(r"embedding|grad_weight|radix_sort|unique_by_key|segment|gather|index|cub::", re.I)),
    ("copy", re.compile(r"copy|Cat|Memcpy", re.I)),  # casts too (autocast's weight casts, their grads')
    ("reduction", re.compile(r"reduce", re.I)),
    ("memset", re.compile(r"Memset|FillFunctor", re.I)),
    ("elementwise", re.compile(r"elementwise|Gelu|Functor", re.I)),
)


def kind(name: str) -> str:
    """The KINDS entry a kernel's name falls under ("other" for none)."""
    return next((k for k, pattern in KINDS if pattern.search(name)), "other")


def by_kind(table: list) -> list:
    """A kernel table's [name, us, launches, ...] rows summed by kind: [kind, us, launches], most
    time first."""
    sums = {}
    for name, us, launches, *_ in table:
        k = sums.setdefault(kind(name), [0.0, 0.0])
        k[0] += us
        k[1] += launches
    return sorted(([k, us, n] for k, (us, n) in sums.items()), key=lambda r: -r[1])


def kernel_profile(fn, per: int) -> dict:
    """GPU kernel time over one profiled fn() (graph replays included), divided by `per` (the
    calls, steps or tokens fn does): summarize()'s figures. Kernel time near the wall time: the
    kernels bound it (bandwidth, occupancy); far below: gaps between kernels do (host work,
    launches)."""
    timing.profiling_gpu()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    by = {}
    for e in prof.events():
        if on_device(e):
            by.setdefault(e.name, []).append(e.time_range.elapsed_us())
    return summarize(by, per)


def profile_beside(fn, per: int, wall_ms: float, unit: str, tracker, name: str) -> dict:
    """kernel_profile next to a measured wall time per `unit`: {kernel_us, kernels, gpu_busy},
    printed with the top kernels and logged, every kernel, as the table `name`. A failure is printed and
    returned as {profile_error}: the timing it explains stands without it."""
    try:
        kp = kernel_profile(fn, per)
    except Exception as e:  # noqa: BLE001
        log.info(f"profile: failed ({type(e).__name__}: {e}); the timing stands")
        return {"profile_error": f"{type(e).__name__}: {e}"}
    busy = kp["kernel_us"] / (wall_ms * 1e3)
    tracker.table(name, ["kernel", f"us_per_{unit}", f"launches_per_{unit}", "median_us"], kp["table"])
    log.info(f"profile: {kp['kernels']:.0f} kernels and {kp['kernel_us']:.1f} us of kernel time per {unit} = "
             f"{busy:.0%} of the wall time per {unit}; top kernels (us/{unit}, count, median us; every kernel "
             f"in the table {name}):")
    for kname, us, n, med in kp["table"][:10]:
        log.info(f"  {us:9.2f} {n:6.1f} {med:8.2f}  {kname}")
    return {"kernel_us": kp["kernel_us"], "kernels": kp["kernels"], "gpu_busy": busy}
