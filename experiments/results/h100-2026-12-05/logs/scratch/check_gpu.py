"""GPU check for proto.py: correctness vs a float64 reference, CUDA-graph replay, and timings.

Run on a CUDA machine from this folder:  python3 check_gpu.py [--M 16384 --K 384 --N 1536]
"""
import argparse
import math

import torch
import torch.nn.functional as F

import proto  # the script's own folder is first on sys.path

S2PI, A = math.sqrt(2.0 / math.pi), 0.044715


def gelu64(h):  # tanh approximation, float64, written out
    return 0.5 * h * (1.0 + torch.tanh(S2PI * (h + A * h ** 3)))


def dgelu64(h):  # d/dh of gelu64
    t = torch.tanh(S2PI * (h + A * h ** 3))
    return 0.5 * (1.0 + t) + 0.5 * h * (1.0 - t * t) * S2PI * (1.0 + 3.0 * A * h * h)


def rel(a, ref):  # normwise max error and elementwise error with a floor of 1e-2 * max|ref|
    a, ref = a.double(), ref.double()
    amax = ref.abs().max().clamp_min(1e-30)
    d = (a - ref).abs()
    return (d.max() / amax).item(), (d / ref.abs().clamp_min(1e-2 * amax)).max().item()


def bench(fn):
    try:
        from triton.testing import do_bench
        return do_bench(fn, warmup=50, rep=300, return_mode="median")
    except ImportError:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(200):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e))
        return sorted(ts)[len(ts) // 2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--M", type=int, default=16384)
    p.add_argument("--K", type=int, default=384)  # = C (model width)
    p.add_argument("--N", type=int, default=1536)  # hidden width
    args = p.parse_args()
    M, K, N = args.M, args.K, args.N
    C = K
    dev = "cuda"
    print(f"torch {torch.__version__} cuda {torch.version.cuda} {torch.cuda.get_device_name()}")
    m = proto.load(verbose=False)
    print(f"cublasLt runtime version {m.cublaslt_version()}")

    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(M, K, device=dev, generator=g).bfloat16()
    w1 = (torch.randn(N, K, device=dev, generator=g) / math.sqrt(K)).bfloat16()
    w2 = (torch.randn(C, N, device=dev, generator=g) / math.sqrt(N)).bfloat16()
    dy = torch.randn(M, C, device=dev, generator=g).bfloat16()

    # ---- forward: g, h = gelu_aux(x @ w1.T)
    g_out, h_out = m.mlp_up_gelu(x, w1)
    h64 = x.double() @ w1.double().T
    g64 = gelu64(h64)
    h_t = F.linear(x, w1)
    g_t = F.gelu(h_t, approximate="tanh")
    print("\nforward vs float64   (normwise max err / elementwise rel err, floor 1e-2*max|ref|)")
    print("  ours  h: %.2e / %.2e   g: %.2e / %.2e" % (*rel(h_out, h64), *rel(g_out, g64)))
    print("  torch h: %.2e / %.2e   g: %.2e / %.2e" % (*rel(h_t, h64), *rel(g_t, g64)))

    # ---- backward: dh = (dy @ w2) * gelu'(h), h = the bf16 pre-activation actually saved
    h_in = h_t  # same bf16 tensor goes to both implementations
    dh_out = m.mlp_dgelu(dy, w2, h_in)
    dh64 = (dy.double() @ w2.double()) * dgelu64(h_in.double())
    dh_t = torch.ops.aten.gelu_backward(dy @ w2, h_in, approximate="tanh")
    print("backward vs float64")
    print("  ours  dh: %.2e / %.2e" % rel(dh_out, dh64))
    print("  torch dh: %.2e / %.2e" % rel(dh_t, dh64))

    # ---- CUDA graph capture + replay (plans and workspace exist already; no re-query)
    n_plans = m.plan_cache_size()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on the capture stream (torch's recommended pattern)
        m.mlp_up_gelu(x, w1)
        m.mlp_dgelu(dy, w2, h_in)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gg, gh = m.mlp_up_gelu(x, w1)
        gdh = m.mlp_dgelu(dy, w2, h_in)
    x.mul_(-1.0)  # change inputs in place, replay must see them
    graph.replay()
    torch.cuda.synchronize()
    d1 = (gg.float() - m.mlp_up_gelu(x, w1)[0].float()).abs().max().item()
    d2 = (gdh.float() - m.mlp_dgelu(dy, w2, h_in).float()).abs().max().item()
    x.mul_(-1.0)
    print(f"graph replay vs eager max|diff|: g {d1:.3g}, dh {d2:.3g}; "
          f"plans cached: {n_plans} -> {m.plan_cache_size()}")

    # ---- timings
    fl_fwd, fl_bwd = 2.0 * M * N * K, 2.0 * M * N * C
    rows = [
        ("fwd ours GELU_AUX (g,h)", lambda: m.mlp_up_gelu(x, w1), fl_fwd),
        ("fwd torch linear+gelu", lambda: F.gelu(F.linear(x, w1), approximate="tanh"), fl_fwd),
        ("fwd torch linear only", lambda: F.linear(x, w1), fl_fwd),
        ("bwd ours DGELU", lambda: m.mlp_dgelu(dy, w2, h_in), fl_bwd),
        ("bwd torch mm+gelu_backward",
         lambda: torch.ops.aten.gelu_backward(dy @ w2, h_in, approximate="tanh"), fl_bwd),
        ("bwd torch mm only", lambda: dy @ w2, fl_bwd),
    ]
    print(f"\nM={M} K=C={K} N={N} bf16, median ms")
    print(f"{'op':30s} {'ms':>8s} {'TFLOP/s':>8s}")
    for name, fn, fl in rows:
        ms = bench(fn)
        print(f"{name:30s} {ms:8.4f} {fl / ms / 1e9:8.1f}")


if __name__ == "__main__":
    main()
