"""The GPU side of a timed region: torch.profiler's kernel events, summed per call, step or token,
beside the wall time that measure() took. gpu_busy = kernel time / wall time says what bounds
the region: near 1, the kernels (bandwidth, occupancy); far below, the gaps between them (host
work, launches). Kernel time comes from a separate profiled run, warm (no L2 flush)."""
import logging

import torch
from torch.profiler import ProfilerActivity, profile

from . import timing

log = logging.getLogger(__name__)


def on_device(e) -> bool:
    """A profiler event that ran on the GPU (a kernel, memcpy or memset), not a host op."""
    return str(getattr(e, "device_type", "")).endswith("CUDA")


NAME = 100  # characters of a kernel's name kept: enough to tell cuBLAS's, cuDNN's and torch's apart


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
