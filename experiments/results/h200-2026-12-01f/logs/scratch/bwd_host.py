"""Scratch: where the host time of an eager attention forward+backward goes."""
import math

import torch
import torch.nn.functional as F

from kernels import triton_attention as TA
from transformerop.measure.timing import host_time, measure

B, H, T, D = 64, 6, 256, 64
q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3))
do = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)


class PySDPA(torch.autograd.Function):
    """SDPA forward and backward under a Python autograd.Function: the cost of a Python backward node."""

    @staticmethod
    def forward(ctx, q, k, v):
        o, lse = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, True, False)[:2]
        ctx.save_for_backward(q, k, v)
        return o

    @staticmethod
    def backward(ctx, g):
        q, k, v = ctx.saved_tensors
        with torch.enable_grad():
            q_, k_, v_ = (t.detach().requires_grad_() for t in (q, k, v))
            o = F.scaled_dot_product_attention(q_, k_, v_, is_causal=True)
        return torch.autograd.grad(o, (q_, k_, v_), g)


o_, lse_ = TA._forward(q.detach(), k.detach(), v.detach(), True, 1 / math.sqrt(D), True)
cases = {
    "sdpa fwd (grad on)": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    "sdpa fwd+bwd grad()": lambda: torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), do),
    "sdpa fwd+bwd .backward()": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(do),
    "ours fwd (grad on)": lambda: TA.attention(q, k, v),
    "ours fwd+bwd grad()": lambda: torch.autograd.grad(TA.attention(q, k, v), (q, k, v), do),
    "ours _backward() alone": lambda: TA._backward(do, q.detach(), k.detach(), v.detach(), o_, lse_, True, 0.125, True),
    "torch mul fwd+bwd grad()": lambda: torch.autograd.grad(q * 2.0, (q,), do),
}
try:
    PySDPA.apply(q, k, v)
    cases["py-wrapped cudnn fwd+bwd grad()"] = lambda: torch.autograd.grad(PySDPA.apply(q, k, v), (q, k, v), do)
except Exception as e:  # noqa
    print("PySDPA failed", e)
for name, fn in cases.items():
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    h = host_time(fn, "cuda")
    w = measure(fn, "cuda")
    print(f"{name:36s} host {h['host_us'] if h['host_us'] is None else round(h['host_us'], 1)} us  wall {w['median_ms'] * 1e3:.1f} us", flush=True)
