"""Scratch: kernels/triton_mlp.py's kernel (persistent TMA, rational erf) under several tiles, each
direction against cuBLAS + eager GELU, then the whole MLP forward+backward fused and unfused;
everything timed inside a CUDA graph (do_bench_cudagraph: median, p20-p80) after a parity check."""
import json, os
import torch, torch.nn.functional as F
import triton
from triton.testing import do_bench_cudagraph
from kernels import triton_mlp as TM

torch.manual_seed(0)
M, C = int(os.environ.get("M", 16384)), int(os.environ.get("C", 384))
N, dt = 4 * C, torch.bfloat16
x = torch.randn(M, C, device="cuda", dtype=dt)
wf = (torch.randn(N, C, device="cuda") / C ** 0.5).to(dt)
wp = (torch.randn(C, N, device="cuda") / N ** 0.5).to(dt)
dy = torch.randn(M, C, device="cuda", dtype=dt)
pre, act, dpre = (torch.empty(M, N, device="cuda", dtype=dt) for _ in range(3))
ref_pre = x.float() @ wf.float().t()
ref_act = F.gelu(ref_pre)
ref_dpre = (dy.float() @ wp.float()) * torch.ops.aten.gelu_backward(torch.ones_like(ref_pre), ref_pre)

def bench(fn):
    fn(); torch.cuda.synchronize()
    return [round(v * 1000, 2) for v in do_bench_cudagraph(fn, rep=200, quantiles=[0.2, 0.5, 0.8], return_mode="median")]

res = {"shape": [M, C, N]}
res["fwd cublas mm+gelu"] = bench(lambda: (torch.mm(x, wf.t(), out=pre), F.gelu(pre)))
res["bwd cublas mm+gelu_bwd"] = bench(lambda: (torch.mm(dy, wp, out=act), torch.ops.aten.gelu_backward(act, pre)))
print(res, flush=True)
# (BM, BN, BK, warps, stages, programs an SM: 1-2 persistent, 99 = one a tile)
sms = torch.cuda.get_device_properties(0).multi_processor_count
fwd = [(128, 128, 64, 8, 2, 2), (128, 128, 64, 4, 2, 2), (128, 128, 32, 8, 3, 2), (64, 128, 64, 4, 3, 2),
       (128, 64, 64, 4, 3, 2), (128, 64, 64, 4, 4, 2), (128, 128, 64, 8, 4, 1), (128, 128, 64, 8, 2, 99)]
bwd = [(128, 128, 32, 8, 3, 2), (128, 128, 32, 4, 3, 2), (64, 128, 64, 4, 3, 2), (128, 64, 64, 4, 3, 2),
       (64, 256, 64, 8, 3, 1), (128, 128, 64, 8, 3, 1), (64, 128, 64, 4, 3, 99), (128, 128, 32, 8, 3, 99)]
best = {}
def use(c):
    TM.tiles = lambda device, dtype=None, backward=False: dict(BM=c[0], BN=c[1], BK=c[2], GROUP_M=8, num_warps=c[3], num_stages=c[4])
    TM._programs = lambda device, n: min(n, c[5] * sms)
for backward, cfgs in ((False, fwd), (True, bwd)):
    for BM, BN, BK, w, s, occ in cfgs:
        use((BM, BN, BK, w, s, occ))
        name = f"{'bwd' if backward else 'fwd'} {BM}x{BN}x{BK} w{w} s{s} occ{occ}"
        try:
            if backward:
                pre.copy_(ref_pre.to(dt))
                fn = lambda: TM._launch(dy, wp, None, pre, dpre, True)
                fn(); torch.cuda.synchronize(); got, ref = dpre, ref_dpre
            else:
                fn = lambda: TM._launch(x, wf, None, pre, act, False)
                fn(); torch.cuda.synchronize(); got, ref = act, ref_act
            err = ((got.float() - ref).abs().max() / ref.abs().max()).item()
            res[name] = bench(fn) + [f"relerr {err:.1e}"]
            if res[name][1] < best.get(backward, (1e9,))[0]:
                best[backward] = (res[name][1], (BM, BN, BK, w, s, occ))
        except Exception as e:
            res[name] = f"failed: {type(e).__name__}: {str(e)[:200]}"
        print(name, res[name], flush=True)
# the whole MLP with each direction's best tiles (the step's two kernels share one tiles function)
fb, bb = best[False][1], best[True][1]
TM.tiles = lambda device, dtype=None, backward=False: dict(zip(("BM", "BN", "BK", "num_warps", "num_stages"), (bb if backward else fb)[:5]), GROUP_M=8)
launch = TM._launch
def launch_best(a, b, bias, pre, out, backward):
    TM._programs = lambda device, n: min(n, (bb if backward else fb)[5] * sms)
    launch(a, b, bias, pre, out, backward)
TM._launch = launch_best
res["best"] = {"fwd": fb, "bwd": bb}
print("best", res["best"], flush=True)
# the whole MLP, forward + backward, as the train step runs it (bf16 weights, autocast off)
fc, proj = torch.nn.Linear(C, N, bias=False).cuda().to(dt), torch.nn.Linear(N, C, bias=False).cuda().to(dt)
xg = x.clone().requires_grad_()
def step(fused):
    y = TM.fused_mlp(xg, fc, proj) if fused else proj(F.gelu(fc(xg)))
    y.backward(dy)
for fused in (False, True, False, True):
    for p in (xg, fc.weight, proj.weight):
        p.grad = None
    step(fused); torch.cuda.synchronize()
    res[f"mlp fwd+bwd fused={fused}"] = bench(lambda: step(fused))
    print(f"mlp fwd+bwd fused={fused}", res[f"mlp fwd+bwd fused={fused}"], flush=True)
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), f"mlp_tiles_{C}.json"), "w"), indent=1)
