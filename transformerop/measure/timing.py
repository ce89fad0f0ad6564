"""The one timing wrapper: triton.testing.do_bench (CUDA events, L2 flushed between calls) on
GPU, torch.utils.benchmark on CPU. Both warm up, synchronize and repeat; we report the median
and the spread (p25-p75 and min-max) with the repeat count. Nothing else in the project
hand-rolls a timer loop.

Keys: median_ms, p25_ms, p75_ms, min_ms, max_ms, repeats (samples behind the statistics),
calls_per_repeat (fn() calls averaged into one sample: 1 on GPU, blocked_autorange's block size
on CPU), warmup (what ran before timing), method.

CPU on a shared machine: with several intra-op threads, a thread descheduled at an OpenMP
barrier stalls every op (we saw 17 ms steps take 1 s); run single-threaded (OMP_NUM_THREADS=1).
Even then, neighbours can swing wall time 10x within seconds. TRANSFORMEROP_CPU_CLOCK=process
times with this process's CPU time instead (time.process_time): immune to being descheduled,
equal to wall time for single-threaded compute on an idle machine, but blind to sleeps and
waits, and summed over threads -- so it is opt-in (the CPU tests use it), wall is the default."""
import logging
import os
import statistics
import time

import torch

log = logging.getLogger(__name__)
# Whether this process has profiled the GPU: torch.profiler leaves CUPTI attached, and every later
# launch pays for it (on the H200 a bare op's host time doubled), so a timing taken after one says
# so (after_profiler) -- isolate such sweeps.
_profiled = {"gpu": False, "warned": False}


def profiling_gpu() -> None:
    """Called by whatever starts a torch.profiler session with CUDA activity."""
    _profiled["gpu"] = True


def _after_profiler() -> dict:
    if not _profiled["gpu"]:
        return {}
    if not _profiled["warned"]:
        _profiled["warned"] = True
        log.warning("timing in a process that already ran torch.profiler: every launch now pays CUPTI's cost "
                    "(a sweep of such jobs wants sweep.isolate=true)")
    return {"after_profiler": True}


def summarize(times_ms: list, warmup: str, method: str, calls_per_repeat: int = 1) -> dict:
    """The stats dict every timing row carries (see the module docstring for the keys)."""
    ts = sorted(times_ms)
    q = statistics.quantiles(ts, n=4, method="inclusive") if len(ts) >= 2 else [ts[0], ts[0], ts[0]]
    return {"median_ms": statistics.median(ts), "p25_ms": q[0], "p75_ms": q[2], "min_ms": ts[0],
            "max_ms": ts[-1], "repeats": len(ts), "calls_per_repeat": calls_per_repeat, "warmup": warmup,
            "method": method}


def measure(fn, device, warmup_ms: float = 25.0, rep_ms: float = 100.0, min_repeats: int = 5) -> dict:
    """Time fn() (which must do the whole region, inputs prepared outside). Returns ms stats."""
    device = torch.device(device)
    if device.type == "cuda":
        from triton.testing import do_bench

        times = list(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all"))
        if len(times) < min_repeats:  # a slow region: do_bench ran it too few times for a spread
            times += list(do_bench(fn, warmup=0, rep=rep_ms * min_repeats / max(1, len(times)),
                                   return_mode="all"))
        return {**summarize(times, f"{warmup_ms} ms (do_bench)", "triton.testing.do_bench", 1), **_after_profiler()}
    from torch.utils import benchmark

    calls, t0 = 0, time.perf_counter()
    while calls == 0 or (time.perf_counter() - t0) * 1e3 < warmup_ms:  # at least one warm-up call
        fn()
        calls += 1
    clock = os.environ.get("TRANSFORMEROP_CPU_CLOCK", "wall")
    if clock not in ("wall", "process"):
        raise ValueError(f"TRANSFORMEROP_CPU_CLOCK={clock!r}: wall or process")
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads(),
                            timer=time.process_time if clock == "process" else time.perf_counter)
    m = timer.blocked_autorange(min_run_time=max(rep_ms / 1e3, 0.01))
    times, number = [t * 1e3 for t in m.times], m.number_per_run
    while len(times) < min_repeats:  # the same block size, so every sample averages as many calls
        times.append(timer.timeit(number).mean * 1e3)
    method = "torch.utils.benchmark" + (" (process CPU time)" if clock == "process" else "")
    return summarize(times, f"{calls} calls ({warmup_ms} ms)", method, number)


HOLD_CYCLES = 2 * 10 ** 7  # the GPU's first hold: ~10 ms of a spinning kernel at ~2 GHz
HOST_BLOCK = 5  # calls per timed block: few enough that their launches never fill the launch queue


def host_time(fn, device, repeats: int = 25) -> dict:
    """How long one fn() call holds the calling thread when it does not wait for the GPU: the
    host's share of an eager call (Python, argument binding, allocation, launches), to set beside
    its kernel time.

    The figure: torch.utils.benchmark times blocks of HOST_BLOCK back-to-back calls, as a loop of
    eager calls runs them, each block after a sync; host_us is a block's time / HOST_BLOCK. Why
    blocks: on the H200 one call timed alone after a sync read 3.5-14x the per-call wall time of
    a host-bound loop of the same call, and blocks timed behind a spinning kernel up to 2.4x
    (experiments/results/h200-2026-12-01g); a loop's wall time bounds its host time per call.
    A call that waits for the GPU itself (it syncs) has no host figure. It is found first, by
    one call queued behind a hold (torch.cuda._sleep, growing until the GPU is still busy when
    the call returns); if every hold drains, host_us is None. Keys: host_us (median over
    blocks), host_p25_us, host_p75_us, host_calls; host_note when there is no figure."""
    from torch.utils import benchmark

    device = torch.device(device)
    cuda = device.type == "cuda"
    if cuda and _waits_for_gpu(fn, device):
        return {"host_us": None, "host_calls": 0, "host_note": "the call waits for the GPU (it syncs)"}

    def block():
        for _ in range(HOST_BLOCK):
            fn()
    setup = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    timer = benchmark.Timer(stmt="block()", setup="setup()", timer=time.perf_counter,
                            globals={"block": block, "setup": setup}, num_threads=torch.get_num_threads())
    per_call = [timer.timeit(1).times[0] * 1e6 / HOST_BLOCK for _ in range(repeats)]
    if cuda:
        torch.cuda.synchronize(device)
    q = statistics.quantiles(per_call, n=4, method="inclusive")
    return {"host_us": statistics.median(per_call), "host_p25_us": q[0], "host_p75_us": q[2],
            "host_calls": repeats * HOST_BLOCK,
            **{f"host_{k}": v for k, v in _after_profiler().items()}}


def _waits_for_gpu(fn, device) -> bool:
    """True when fn() still finds the GPU idle after ~0.6 s of hold: it waits for the GPU."""
    hold = HOLD_CYCLES
    while True:
        torch.cuda.synchronize(device)
        torch.cuda._sleep(hold)
        fn()
        drained = torch.cuda.current_stream(device).query()
        torch.cuda.synchronize(device)
        if not drained:
            return False
        if hold >= HOLD_CYCLES * 64:
            return True
        hold *= 4
