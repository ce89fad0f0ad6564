"""The one timing wrapper: triton.testing.do_bench (CUDA events, cache flush between calls) on
GPU, torch.utils.benchmark on CPU. Both warm up, synchronize and repeat; we report the median
and the spread (p25-p75 and min-max) with the repeat count. Nothing else in the project
hand-rolls a timer loop."""
import statistics

import torch


def _stats(times_ms: list, warmup: str, method: str) -> dict:
    ts = sorted(times_ms)
    q = statistics.quantiles(ts, n=4) if len(ts) >= 2 else [ts[0], ts[0], ts[0]]
    return {"median_ms": statistics.median(ts), "p25_ms": q[0], "p75_ms": q[2], "min_ms": ts[0],
            "max_ms": ts[-1], "repeats": len(ts), "warmup": warmup, "method": method}


def measure(fn, device, warmup_ms: float = 25.0, rep_ms: float = 100.0, min_repeats: int = 5) -> dict:
    """Time fn() (which must do the whole region, inputs prepared outside). Returns ms stats."""
    device = torch.device(device)
    if device.type == "cuda":
        from triton.testing import do_bench

        times = do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all")
        if len(times) < min_repeats:  # a slow region: do_bench ran it too few times for a spread
            times = list(times) + list(do_bench(fn, warmup=0, rep=rep_ms * min_repeats / max(1, len(times)),
                                                return_mode="all"))
        return _stats(list(times), f"{warmup_ms} ms (do_bench)", "triton.testing.do_bench")
    from torch.utils import benchmark

    fn()  # warm-up call outside the timed blocks
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    m = timer.blocked_autorange(min_run_time=max(rep_ms / 1e3, 0.05))
    times = [t * 1e3 for t in m.times]
    while len(times) < min_repeats:
        times += [t * 1e3 for t in timer.blocked_autorange(min_run_time=rep_ms / 1e3).times]
    return _stats(times, "1 call + blocked_autorange", "torch.utils.benchmark")
