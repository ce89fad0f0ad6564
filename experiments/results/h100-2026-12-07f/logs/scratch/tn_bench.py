"""The tied embedding's two weight gradients at the seed's step (16,384 tokens, 65 x 384): kernels/triton_tn.py
against split_k's path (one-hot memset + scatter, split-K bmm, sum), float64 gate first, do_bench median."""
import torch
from triton.testing import do_bench

from kernels.triton_tn import tn
from transformerop.model import split_k

torch.manual_seed(0)
n, R, C, dev = 16_384, 65, 384, "cuda"
idx = torch.randint(0, R, (n,), device=dev)
old = lambda f: (setattr(split_k, "_kernel", lambda *a: False), f(), setattr(split_k, "_kernel", real))[1]
real = split_k._kernel
for name, g, a in (("one-hot, g fp32", torch.randn(n, C, device=dev), None),
                   ("one-hot, g bf16", torch.randn(n, C, device=dev).bfloat16(), None),
                   ("head g^T x, bf16", torch.randn(n, C, device=dev).bfloat16(), torch.randn(n, R, device=dev).bfloat16())):
    if a is None:
        want = torch.zeros(R, C, dtype=torch.float64, device=dev).index_add_(0, idx, g.double())
        new_f, old_f = (lambda: split_k.one_hot_t_matmul(idx, R, g)), (lambda: old(lambda: split_k.one_hot_t_matmul(idx, R, g)))
    else:
        want = a.double().t() @ g.double()
        new_f, old_f = (lambda: split_k.t_matmul(a, g)), (lambda: old(lambda: split_k.t_matmul(a, g)))
    for tag, f in (("split_k (before)", old_f), ("triton_tn", new_f)):
        err = ((f().double() - want).abs().max() / want.abs().max()).item()
        q = do_bench(f, warmup=25, rep=200, quantiles=[0.5, 0.25, 0.75])
        print(f"{name:18s} {tag:17s} err {err:.1e}  {1000 * q[0]:6.1f} us ({1000 * q[1]:.1f}-{1000 * q[2]:.1f})", flush=True)
