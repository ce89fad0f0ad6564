"""Scratch: the fused MLP kernels' tiles against cuBLAS + eager GELU at the speedrun's shape,
each timed inside a CUDA graph (do_bench_cudagraph, median and p20-p80), after a parity check."""
import json, os, sys
import torch, torch.nn.functional as F
import triton
from triton.testing import do_bench_cudagraph
from kernels.triton_mlp import _fc_gelu_kernel

torch.manual_seed(0)
M, C = int(os.environ.get("M", 16384)), int(os.environ.get("C", 384))
N = 4 * C
dt = torch.bfloat16
x = torch.randn(M, C, device="cuda", dtype=dt)
wf = (torch.randn(N, C, device="cuda") / C ** 0.5).to(dt)
wp = (torch.randn(C, N, device="cuda") / N ** 0.5).to(dt)
dy = torch.randn(M, C, device="cuda", dtype=dt)
pre = torch.empty(M, N, device="cuda", dtype=dt); act = torch.empty_like(pre); dpre = torch.empty_like(pre)

def bench(fn):
    fn(); torch.cuda.synchronize()
    q = do_bench_cudagraph(fn, rep=200, quantiles=[0.2, 0.5, 0.8], return_mode="median")
    return [round(v * 1000, 2) for v in q]

def launch(cfg, backward):
    BM, BN, BK, G, w, s = cfg
    if backward:
        a, b, sbn, sbk, out = dy, wp, 1, wp.stride(0), dpre
    else:
        a, b, sbn, sbk, out = x, wf, wf.stride(0), 1, act
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    _fc_gelu_kernel[grid](a, b, out, pre, out, M, N, C, a.stride(0), sbn, sbk, HAS_BIAS=False,
                          BACKWARD=backward, PRECISION="tf32", BM=BM, BN=BN, BK=BK, GROUP_M=G,
                          num_warps=w, num_stages=s)

ref_pre = (x.float() @ wf.float().t())
ref_act = F.gelu(ref_pre)
ref_dact = dy.float() @ wp.float()
res = {"shape": [M, C, N], "fwd": {}, "bwd": {}}
res["fwd"]["cublas_mm"] = bench(lambda: torch.mm(x, wf.t(), out=pre))
res["fwd"]["cublas_mm+gelu"] = bench(lambda: (torch.mm(x, wf.t(), out=pre), F.gelu(pre)))
res["bwd"]["cublas_mm"] = bench(lambda: torch.mm(dy, wp, out=act))
res["bwd"]["cublas_mm+gelu_bwd"] = bench(lambda: (torch.mm(dy, wp, out=act),
                                                  torch.ops.aten.gelu_backward(act, pre)))
cfgs = [(64, 128, 64, 8, 4, 3), (64, 64, 64, 8, 4, 3), (128, 128, 64, 8, 8, 3), (128, 128, 64, 8, 4, 3),
        (128, 128, 64, 8, 8, 4), (128, 256, 64, 8, 8, 3), (256, 128, 64, 8, 8, 3), (128, 64, 64, 8, 4, 4),
        (64, 256, 64, 8, 8, 3), (128, 128, 128, 8, 8, 2), (128, 128, 32, 8, 4, 5), (128, 256, 64, 4, 8, 4),
        (256, 64, 64, 8, 8, 3), (64, 128, 128, 8, 4, 3), (128, 128, 64, 16, 8, 3), (256, 128, 64, 8, 8, 4)]
for backward in (False, True):
    key = "bwd" if backward else "fwd"
    for cfg in cfgs:
        name = "x".join(map(str, cfg))
        try:
            launch(cfg, backward); torch.cuda.synchronize()
            if backward:
                pre.copy_(ref_pre.to(dt))
                launch(cfg, True); torch.cuda.synchronize()
                d = ref_dact * (torch.ops.aten.gelu_backward(torch.ones_like(ref_pre), ref_pre))
                err = ((dpre.float() - d).abs().max() / d.abs().max()).item()
            else:
                err = ((act.float() - ref_act).abs().max() / ref_act.abs().max()).item()
            res[key][name] = bench(lambda: launch(cfg, backward)) + [f"relerr {err:.1e}"]
        except Exception as e:  # out of shared memory or registers
            res[key][name] = f"failed: {type(e).__name__}: {str(e)[:120]}"
        print(key, name, res[key][name], flush=True)
print(json.dumps(res, indent=1))
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), f"mlp_bench_{C}.json"), "w"), indent=1)
