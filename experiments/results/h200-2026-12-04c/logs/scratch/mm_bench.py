"""Scratch: where a Triton matmul of the MLP's shape loses to cuBLAS -- masked pointer loads,
unmasked, TMA descriptors, TMA persistent -- each with and without the GELU epilogue, inside a
CUDA graph (do_bench_cudagraph median, p20-p80), after a parity check."""
import json, os
import torch, torch.nn.functional as F
import triton, triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

SQRT1_2 = tl.constexpr(0.7071067811865476)
INV_SQRT_2PI = tl.constexpr(0.3989422804014327)

@triton.jit
def _pid(tile, M, N, BM: tl.constexpr, BN: tl.constexpr, G: tl.constexpr):
    tm, tn = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = tile // (G * tn)
    first = group * G
    rows = tl.minimum(tm - first, G)
    return first + (tile % (G * tn)) % rows, (tile % (G * tn)) // rows

@triton.jit
def _epilogue(acc, pre):  # forward: GELU(acc); backward: acc * GELU'(pre)
    if pre is None:
        return 0.5 * acc * (1.0 + tl.math.erf(acc * SQRT1_2))
    p = pre.to(tl.float32)
    return acc * (0.5 * (1.0 + tl.math.erf(p * SQRT1_2)) + p * tl.exp(-0.5 * p * p) * INV_SQRT_2PI)

@triton.jit
def mm_ptr(A, B, PRE, OUT, M, N, K, sbn, sbk, MODE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
           BK: tl.constexpr, G: tl.constexpr):
    # MODE 0: PRE = A B^T; 1: + OUT = GELU; 2: OUT = acc * GELU'(PRE). No masks: divisible shapes
    pid_m, pid_n = _pid(tl.program_id(0), M, N, BM, BN, G)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = A + rm[:, None] * K + rk[None, :]
    b_ptrs = B + rn[None, :] * sbn + rk[:, None] * sbk
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
        a_ptrs += BK
        b_ptrs += BK * sbk
    offs = rm[:, None] * N + rn[None, :]
    if MODE == 2:
        tl.store(OUT + offs, _epilogue(acc, tl.load(PRE + offs)).to(OUT.dtype.element_ty))
    else:
        tl.store(PRE + offs, acc.to(PRE.dtype.element_ty))
        if MODE == 1:
            tl.store(OUT + offs, _epilogue(acc, None).to(OUT.dtype.element_ty))

@triton.jit
def mm_tma(a_d, b_d, pre_d, out_d, M, N, K, NUM_SMS: tl.constexpr, MODE: tl.constexpr, BT: tl.constexpr,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, G: tl.constexpr, PERSIST: tl.constexpr):
    # BT: B's descriptor is (K, N) (a transposed read: the backward's W_proj as stored), else (N, K)
    tiles = tl.cdiv(M, BM) * tl.cdiv(N, BN)
    start = tl.program_id(0)
    step = NUM_SMS if PERSIST else tiles
    for tile in tl.range(start, tiles, step, flatten=PERSIST):
        pid_m, pid_n = _pid(tile, M, N, BM, BN, G)
        om, on = pid_m * BM, pid_n * BN
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = a_d.load([om, k])
            if BT:
                acc = tl.dot(a, b_d.load([k, on]), acc)
            else:
                acc = tl.dot(a, b_d.load([on, k]).T, acc)
        if MODE == 2:
            out_d.store([om, on], _epilogue(acc, pre_d.load([om, on])).to(out_d.dtype))
        else:
            pre_d.store([om, on], acc.to(pre_d.dtype))
            if MODE == 1:
                out_d.store([om, on], _epilogue(acc, None).to(out_d.dtype))

def main():
    torch.manual_seed(0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    M, C = int(os.environ.get("M", 16384)), int(os.environ.get("C", 384))
    N = 4 * C
    dt = getattr(torch, os.environ.get("DT", "bfloat16"))
    x = torch.randn(M, C, device=dev, dtype=dt)
    wf = (torch.randn(N, C, device=dev) / C ** 0.5).to(dt)
    wp = (torch.randn(C, N, device=dev) / N ** 0.5).to(dt)
    dy = torch.randn(M, C, device=dev, dtype=dt)
    pre = torch.empty(M, N, device=dev, dtype=dt); act = torch.empty_like(pre); dpre = torch.empty_like(pre)
    ref_pre = x.float() @ wf.float().t()
    ref_act = F.gelu(ref_pre)
    ref_dpre = (dy.float() @ wp.float()) * torch.ops.aten.gelu_backward(torch.ones_like(ref_pre), ref_pre)
    sms = torch.cuda.get_device_properties(0).multi_processor_count if dev == "cuda" else 4
    quick = dev == "cpu"

    def bench(fn):
        fn()
        if quick:
            return []
        torch.cuda.synchronize()
        q = triton.testing.do_bench_cudagraph(fn, rep=200, quantiles=[0.2, 0.5, 0.8], return_mode="median")
        return [round(v * 1000, 2) for v in q]

    def run(kind, mode, cfg):
        BM, BN, BK, G, w, s = cfg
        a = dy if mode == 2 else x
        out = dpre if mode == 2 else act
        if kind == "ptr":
            b, sbn, sbk = (wp, 1, N) if mode == 2 else (wf, C, 1)
            grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
            return lambda: mm_ptr[grid](a, b, pre, out, M, N, C, sbn, sbk, MODE=mode, BM=BM, BN=BN, BK=BK, G=G,
                                        num_warps=w, num_stages=s)
        a_d = TensorDescriptor.from_tensor(a, [BM, BK])
        b_d = TensorDescriptor.from_tensor(wp, [BK, BN]) if mode == 2 else TensorDescriptor.from_tensor(wf, [BN, BK])
        pre_d = TensorDescriptor.from_tensor(pre, [BM, BN])
        out_d = TensorDescriptor.from_tensor(out, [BM, BN])
        persist = kind == "tma_persist"
        tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
        grid = (min(sms, tiles) if persist else tiles,)
        return lambda: mm_tma[grid](a_d, b_d, pre_d, out_d, M, N, C, NUM_SMS=grid[0], MODE=mode, BT=mode == 2,
                                    BM=BM, BN=BN, BK=BK, G=G, PERSIST=persist, num_warps=w, num_stages=s)

    res = {"shape": [M, C, N]}
    if not quick:
        res["cublas mm"] = bench(lambda: torch.mm(x, wf.t(), out=pre))
        res["cublas mm+gelu"] = bench(lambda: (torch.mm(x, wf.t(), out=pre), F.gelu(pre)))
        res["cublas bwd mm+gelu_bwd"] = bench(lambda: (torch.mm(dy, wp, out=act), torch.ops.aten.gelu_backward(act, pre)))
    cfgs = [(128, 128, 64, 8, 8, 3), (128, 128, 64, 8, 4, 4), (128, 256, 64, 8, 8, 3), (128, 64, 64, 8, 4, 4),
            (64, 128, 64, 8, 4, 4), (256, 128, 64, 8, 8, 3), (128, 128, 128, 8, 8, 2), (128, 256, 64, 8, 8, 4)]
    if quick:
        cfgs = [(16, 32, 16, 2, 1, 1)]
    for kind in ("ptr", "tma", "tma_persist"):
        for mode in (0, 1, 2):
            for cfg in cfgs:
                name = f"{kind} mode{mode} " + "x".join(map(str, cfg))
                try:
                    fn = run(kind, mode, cfg)
                    fn()
                    if mode == 2:
                        pre.copy_(ref_pre.to(dt)); fn(); got, ref = dpre, ref_dpre
                    else:
                        got, ref = (act, ref_act) if mode == 1 else (pre, ref_pre)
                    err = ((got.float() - ref).abs().max() / ref.abs().max()).item()
                    res[name] = bench(fn) + [f"relerr {err:.1e}"]
                except Exception as e:
                    res[name] = f"failed: {type(e).__name__}: {str(e)[:160]}"
                print(name, res[name], flush=True)
    json.dump(res, open(os.path.join(os.environ.get("OUT", "."), f"mm_bench_{C}.json"), "w"), indent=1)
    print({k: v for k, v in res.items() if k.startswith("cublas")})

main()
