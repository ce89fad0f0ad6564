"""A fresh machine's start-up, seen from inside: run.py as `python run.py ...` runs it, with
every Triton compile timed (kernel name, thread, start and end on the job's clock: seconds from
the process launch) and the process's CPU time (its own threads, and its children: ptxas) over the
kernel warm-ups' window. CPU time near the window's wall time means the compiles ran one at a time."""
import resource
import runpy
import sys
import threading
import time

import triton.compiler.compiler as tc

from transformerop import clock, cuda_early

spans = []
_compile = tc.compile


def since_launch():
    return time.time() - clock.process_start()


def compile(src, *args, **kwargs):
    t0 = since_launch()
    try:
        return _compile(src, *args, **kwargs)
    finally:
        name = getattr(getattr(src, "fn", None), "__name__", str(src)[:40])
        spans.append((t0, since_launch(), threading.current_thread().name, name))


tc.compile = compile
import triton.compiler  # noqa: E402 -- the JIT imports compile from the package, not the module
import triton.runtime.jit as jit  # noqa: E402
triton.compiler.compile = compile
jit.compile = compile
_launch_all = cuda_early._launch_all


def launch_all(make_calls, gpu):
    r0, c0, w0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN), since_launch()
    try:
        return _launch_all(make_calls, gpu)
    finally:
        r1, c1, w1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN), since_launch()
        cpu = lambda a, b: (b.ru_utime - a.ru_utime) + (b.ru_stime - a.ru_stime)  # noqa: E731
        print(f"kernel warm-ups: {w0:.2f} -> {w1:.2f} s (wall {w1 - w0:.2f}); process CPU {cpu(r0, r1):.2f} s, "
              f"children (ptxas) CPU {cpu(c0, c1):.2f} s", flush=True)
        for a, b, thread, name in sorted(spans):
            print(f"  compile {name:32s} {thread:18s} {a:6.2f} -> {b:6.2f} ({b - a:.2f})", flush=True)
        print(f"  {len(spans)} compiles, {sum(b - a for a, b, *_ in spans):.2f} s summed", flush=True)
        from kernels import cublaslt_mlp, cuda_build
        print("  cuBLASLt C library:", cuda_build.build_info(cublaslt_mlp.EXTENSION), flush=True)


cuda_early._launch_all = launch_all
sys.argv = ["run.py", *sys.argv[1:]]
runpy.run_path("run.py", run_name="__main__")
