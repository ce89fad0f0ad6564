"""cuBLASLt DGELU at the speedrun's shape (M 16,384, C 384, N 1,536, bf16): W2 as stored (NN) or
its transpose (TN), against the unfused form (dy W2 then the tanh GELU's backward). Correct
first (float64 reference), then do_bench medians."""
import torch
from triton.testing import do_bench

from kernels import cublaslt_mlp

torch.manual_seed(0)
M, C = 16384, 384
N = 4 * C
dy = torch.randn(M, C, device="cuda").bfloat16()
w2 = (torch.randn(C, N, device="cuda") / 32).bfloat16()
h = torch.randn(M, N, device="cuda").bfloat16()
w2t = w2.t().contiguous()


def gelu_grad64(h):
    k = (2 / torch.pi) ** 0.5
    u = k * (h + 0.044715 * h ** 3)
    t = torch.tanh(u)
    return 0.5 * (1 + t) + 0.5 * h * (1 - t * t) * k * (1 + 3 * 0.044715 * h * h)


ref = (dy.double() @ w2.double()) * gelu_grad64(h.double())
ext = cublaslt_mlp._ext()
forms = {
    "DGELU NN (w2)": lambda: ext.mlp_dgelu(dy, w2, h, False),
    "DGELU TN (w2t)": lambda: ext.mlp_dgelu(dy, w2t, h, True),
    "unfused dy@w2 + gelu bwd": lambda: torch.ops.aten.gelu_backward(dy @ w2, h, approximate="tanh"),
    "matmul dy@w2 alone": lambda: dy @ w2,
}
for name, f in forms.items():
    out = f()
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item() if "alone" not in name else float("nan")
    us = 1e3 * do_bench(f, warmup=50, rep=300, return_mode="median")
    q = do_bench(f, warmup=10, rep=300, quantiles=[0.25, 0.75])
    print(f"{name:26s} rel err {err:.2e}  median {us:6.1f} us  (p25-p75 {1e3 * q[0]:.1f}-{1e3 * q[1]:.1f})")
for p in cublaslt_mlp.plans():
    print("plan", p)
