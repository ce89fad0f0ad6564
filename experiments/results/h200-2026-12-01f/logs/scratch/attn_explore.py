"""Scratch: where the bf16 attention stands against SDPA at the issue's shapes, per tile, and the host cost."""
import cProfile
import io
import json
import math
import os
import pstats
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

from kernels import triton_attention as TA
from kernels.triton_attention_kernels import _cfg

OUT = os.environ.get("OUT", "/tmp")
B = int(os.environ.get("B", 64))
H = 6
part = sys.argv[1] if len(sys.argv) > 1 else "all"
res = []


def emit(**kw):
    res.append(kw)
    print(json.dumps(kw), flush=True)


def graphed(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def bench(fn):
    return do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3  # us


def inputs(T, D):
    q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3))
    do = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)
    return q, k, v, do


def sdpa_fns(q, k, v, do, backend=None):
    def f():
        with torch.no_grad():
            if backend is None:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fb():
        if backend is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            with sdpa_kernel(backend):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return torch.autograd.grad(o, (q, k, v), do)
    return f, fb


def ours_fns(q, k, v, do):
    def f():
        with torch.no_grad():
            return TA.attention(q, k, v, causal=True)

    def fb():
        return torch.autograd.grad(TA.attention(q, k, v, causal=True), (q, k, v), do)
    return f, fb


SHAPES = [(T, D) for D in (64, 128) for T in (256, 512, 1024, 2048)]

if part in ("all", "compare"):
    for T, D in SHAPES:
        q, k, v, do = inputs(T, D)
        row = dict(part="compare", T=T, D=D, B=B)
        for name, be in (("sdpa", None), ("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                f, fb = sdpa_fns(q, k, v, do, be)
                row[f"{name}_fwd_eager"], row[f"{name}_fb_eager"] = bench(f), bench(fb)
                row[f"{name}_fwd_graph"], row[f"{name}_fb_graph"] = bench(graphed(f)), bench(graphed(fb))
            except Exception as e:  # noqa
                row[f"{name}_err"] = str(e)[:80]
        TA.force_configs = None
        f, fb = ours_fns(q, k, v, do)
        f(); fb()
        row["ours_fwd_eager"], row["ours_fb_eager"] = bench(f), bench(fb)
        row["ours_fwd_graph"], row["ours_fb_graph"] = bench(graphed(f)), bench(graphed(fb))
        row["tuned"] = {str(kk[0]): vv for kk, vv in TA.launch.__globals__["_tuned"].items()
                        if kk[3] == 1 << (T - 1).bit_length() and kk[5] == D}
        emit(**row)
        del q, k, v, do
    # which kernels SDPA runs by default
    q, k, v, do = inputs(1024, 128)
    f, fb = sdpa_fns(q, k, v, do)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
        fb(); torch.cuda.synchronize()
    emit(part="sdpa_kernels", names=sorted({e.name[:90] for e in p.events() if e.device_type.name == "CUDA"}))

FWD = [(16, 64, 4, 2), (32, 64, 2, 2), (64, 64, 4, 1), (64, 64, 4, 2), (64, 64, 4, 3), (128, 32, 4, 2),
       (128, 64, 8, 3), (128, 64, 8, 2), (128, 64, 4, 3), (128, 128, 8, 2), (128, 128, 8, 3), (64, 128, 4, 3),
       (64, 128, 4, 2), (128, 32, 8, 3), (64, 32, 4, 3), (128, 64, 8, 4)]
BWD = [(16, 16, 2, 1), (32, 32, 4, 1), (64, 16, 4, 2), (64, 32, 4, 2), (64, 32, 4, 3), (64, 64, 4, 2),
       (128, 64, 8, 2), (128, 32, 8, 2), (64, 64, 8, 2), (128, 64, 8, 1), (64, 128, 8, 2), (32, 64, 4, 2),
       (128, 128, 8, 1), (64, 64, 4, 3), (128, 32, 4, 2), (32, 128, 4, 2)]

if part in ("all", "tiles"):
    for T, D in SHAPES:
        q, k, v, do = inputs(T, D)
        scale = 1 / math.sqrt(D)
        o, lse = TA._forward(q, k, v, True, scale, True)
        for kind, cfgs in (("fwd", FWD), ("bwd", BWD)):
            times = {}
            for c in cfgs:
                cd = dict(BLOCK_M=c[0], BLOCK_N=c[1], num_warps=c[2], num_stages=c[3])
                TA.force_configs = (cd, cd)
                try:
                    if kind == "fwd":
                        g = graphed(lambda: TA._forward(q, k, v, True, scale, True))
                    else:
                        g = graphed(lambda: TA._backward(do, q, k, v, o, lse, True, scale, True))
                    times[str(c)] = round(bench(g), 2)
                except Exception as e:  # noqa
                    times[str(c)] = str(e)[:40]
            best = sorted((t, c) for c, t in times.items() if isinstance(t, float))[:4]
            emit(part="tiles", kind=kind, T=T, D=D, best=best, all=times)
        TA.force_configs = None
        del q, k, v, do, o, lse
        torch.cuda.empty_cache()

if part in ("all", "host"):
    T, D = 256, 64
    q, k, v, do = inputs(T, D)
    for name, (f, fb) in (("sdpa", sdpa_fns(q, k, v, do)), ("ours", ours_fns(q, k, v, do))):
        for kind, fn in (("fwd", f), ("fb", fb)):
            for _ in range(20):
                fn()
            ts = []
            for _ in range(300):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
            torch.cuda.synchronize()
            ts.sort()
            emit(part="host", name=name, kind=kind, host_us_median=ts[150] * 1e6, p25=ts[75] * 1e6, p75=ts[225] * 1e6)
    f, fb = ours_fns(q, k, v, do)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(500):
        fb()
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
    print(s.getvalue()[:6000])

json.dump(res, open(os.path.join(OUT, f"explore_{part}.json"), "w"), indent=1)
