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


def host_time(fn, device, repeats: int = 25) -> dict:
    """How long one fn() call holds the calling thread when it never waits for the GPU: the
    host's share of an eager call (Python, argument binding, allocation, launches), to set beside
    its kernel time. On CUDA each timed call starts on an empty queue held by a spinning kernel
    (torch.cuda._sleep, after a sync), so its launches queue behind the hold: none waits for a
    finished kernel, and one call's launches alone never fill the queue (twenty queued graph
    replays of a train step did, and then each waited for a step). The hold grows until the GPU
    is still busy when the call returns; a call that still finds it idle waits for the GPU itself
    (it syncs): host_us is then None. torch.utils.benchmark times one call per repeat (after its
    own warm-up calls, each block after the sync and the hold). Keys: host_us (median over
    repeats), host_p25_us, host_p75_us, host_calls; host_note when there is no figure."""
    from torch.utils import benchmark

    device = torch.device(device)
    cuda = device.type == "cuda"
    hold = [HOLD_CYCLES]

    def sync_and_hold():
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda._sleep(hold[0])
    timer = benchmark.Timer(stmt="fn()", setup="sync_and_hold()", timer=time.perf_counter,
                            globals={"fn": fn, "sync_and_hold": sync_and_hold}, num_threads=torch.get_num_threads())
    per_call = []
    while len(per_call) < repeats:
        us = timer.timeit(1).times[0] * 1e6
        drained = cuda and torch.cuda.current_stream(device).query()
        if cuda:
            torch.cuda.synchronize(device)
        if not drained:
            per_call.append(us)
        elif hold[0] >= HOLD_CYCLES * 64:  # ~0.6 s of hold drained: the call waits for the GPU
            return {"host_us": None, "host_calls": len(per_call), "host_note": "the call waits for the GPU (it syncs)"}
        else:
            hold[0] *= 4
    q = statistics.quantiles(per_call, n=4, method="inclusive")
    return {"host_us": statistics.median(per_call), "host_p25_us": q[0], "host_p75_us": q[2], "host_calls": repeats,
            **{f"host_{k}": v for k, v in _after_profiler().items()}}
