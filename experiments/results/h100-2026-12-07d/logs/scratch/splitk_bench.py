"""The tied embedding's two weight-gradient products at the seed's step (16,384 tokens, 65 rows, 384 wide):
one matmul against split_k.t_matmul; each checked against float64 first, then do_bench (median, p25-p75)."""
import torch
from triton.testing import do_bench
from transformerop.model.split_k import fp32_partials, t_matmul, splits

torch.manual_seed(0)
n, V, C = 16384, 65, 384
idx = torch.randint(0, V, (n,), device="cuda")
g32 = torch.randn(n, C, device="cuda")
one_hot = torch.zeros(n, V, device="cuda").scatter_(1, idx[:, None], 1.0)
gh = (torch.randn(n, V, device="cuda") * 1e-3).bfloat16()
x = torch.randn(n, C, device="cuda").bfloat16()
print(f"splits({n}) = {splits(n)}, bmm out_dtype available: {fp32_partials('cuda')}")
cases = {"wte one-hot^T g (fp32)": (one_hot, g32, lambda: one_hot.t() @ g32),
         "head g^T x (bf16)": (gh, x, lambda: (gh.t() @ x).float())}
for name, (a, b, old) in cases.items():
    want = a.double().t() @ b.double()
    err = lambda r: ((r.double() - want).abs().max() / want.abs().max()).item()  # noqa: E731
    new = lambda: t_matmul(a, b)  # noqa: E731
    print(f"{name}: rel err one matmul {err(old()):.2e}, split {err(new()):.2e}")
    for label, fn in (("one matmul", old), ("split", new)):
        q = do_bench(fn, warmup=25, rep=200, quantiles=[0.5, 0.25, 0.75])
        print(f"  {label:10s} {q[0] * 1e3:7.1f} us ({q[1] * 1e3:.1f}-{q[2] * 1e3:.1f})")
