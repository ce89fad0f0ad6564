"""The tied embedding's two gradient products (16,384 x 65 against 16,384 x 384) cut into S runs: bmm + sum,
each S checked against float64 first, then do_bench median (p25-p75); and the fp32 one as (g^T one_hot)^T."""
import torch
from triton.testing import do_bench

torch.manual_seed(0)
n, V, C = 16384, 65, 384
idx = torch.randint(0, V, (n,), device="cuda")
g32 = torch.randn(n, C, device="cuda")
one_hot = torch.zeros(n, V, device="cuda").scatter_(1, idx[:, None], 1.0)
gh = (torch.randn(n, V, device="cuda") * 1e-3).bfloat16()
x = torch.randn(n, C, device="cuda").bfloat16()


def split(a, b, s, t=False):
    a3, b3 = a.reshape(s, n // s, a.shape[1]), b.reshape(s, n // s, b.shape[1])
    kw = {"out_dtype": torch.float32} if a.dtype == torch.bfloat16 else {}
    if t:  # (b^T a)^T
        return torch.bmm(b3.transpose(1, 2), a3, **kw).sum(0).t()
    return torch.bmm(a3.transpose(1, 2), b3, **kw).sum(0)


for name, a, b in (("fp32 one_hot^T g", one_hot, g32), ("bf16 g^T x", gh, x)):
    want = a.double().t() @ b.double()
    for t in (False, True):
        for s in (1, 8, 16, 32, 64, 128):
            fn = lambda: split(a, b, s, t)  # noqa: E731
            err = ((fn().double() - want).abs().max() / want.abs().max()).item()
            q = do_bench(fn, warmup=25, rep=150, quantiles=[0.5, 0.25, 0.75])
            print(f"{name:18s} {'(b^T a)^T' if t else 'a^T b':9s} S={s:4d} err {err:.1e}  {q[0] * 1e3:6.1f} us ({q[1] * 1e3:.1f}-{q[2] * 1e3:.1f})",
                  flush=True)
