"""Fused causal attention from kernels/attention.cu, the seed's ladder v1..v5 (attention.version).

The forward is the CUDA kernel; the backward is NOT a kernel: it recomputes softmax(q k^T) in
torch (fp32) and applies the textbook gradient, so `backward = "reference"` and results say
attention_backward=reference. Training works; timing a training step measures that mix.
"""
import torch

from .base import CausalSelfAttention, causal_mask

VERSIONS = (1, 2, 3, 4, 5)
HEAD_DIMS = (16, 32, 64, 128)  # kernels are templated on these (see attention.cu)
MASK_ERROR = "attention=cuda is causal only and takes no explicit mask: use a decode path without one"


def attention_forward(q, k, v, version: int, scale: float, out=None):
    """Kernel forward on (B, H, T, D) q and (B, H, Tk, D) k, v (any strides with a contiguous
    head dim). The result is a (B, H, Tq, D) view of a (B, Tq, H, D) buffer, so the caller's
    transpose back to (B, T, C) is free. `out` lets a test poison the output first."""
    from kernels import cuda_build  # the build loads only when this backend runs

    if out is None:
        B, H, Tq, D = q.shape
        out = torch.empty(B, Tq, H, D, dtype=q.dtype, device=q.device).transpose(1, 2)
    cuda_build.load().attention_forward(q, k, v, out, int(version), float(scale))
    return out


def reference_backward(q, k, v, grad_out, scale: float):
    """(dq, dk, dv) of causal softmax attention, recomputed in fp32 torch (T x T materialized)."""
    qf, kf, vf, gf = (t.float() for t in (q, k, v, grad_out))
    s = (qf @ kf.transpose(-2, -1)) * scale
    s = s.masked_fill(~causal_mask(q.size(-2), k.size(-2), q.device), float("-inf"))
    p = torch.softmax(s, dim=-1)
    dv = p.transpose(-2, -1) @ gf
    dp = gf @ vf.transpose(-2, -1)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))  # softmax backward, row by row
    dq = (ds @ kf) * scale
    dk = (ds.transpose(-2, -1) @ qf) * scale
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class CudaAttentionFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, version, scale):
        ctx.save_for_backward(q, k, v)
        ctx.scale = scale
        return attention_forward(q, k, v, version, scale)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensors
        return (*reference_backward(q, k, v, grad_out, ctx.scale), None, None)


class CudaAttention(CausalSelfAttention):
    """attention=cuda: fp32 or bf16 (fp32 accumulation), head dims 16/32/64/128, causal only
    (mask=None, Tq <= Tk, so a growing KV cache works). No dropout on the attention probabilities:
    it cannot be fused into these kernels, so model.dropout applies only to the residual path."""

    supports_cache = True
    accepts_mask = False  # causal only: no masked preallocated caches
    backward = "reference"
    head_dims = HEAD_DIMS

    def __init__(self, mcfg, acfg):
        super().__init__(mcfg, acfg)
        self.version = int(acfg.version)
        if self.version not in VERSIONS:
            raise ValueError(f"attention.version={acfg.version}: the cuda ladder has versions {VERSIONS}")
        if self.head_dim not in HEAD_DIMS:
            raise ValueError(f"attention=cuda supports head dims {HEAD_DIMS}, "
                             f"not {self.head_dim} (model.n_embd / model.n_head)")

    @classmethod
    def check(cls, cfg, device):
        super().check(cfg, device)  # dtype
        if cfg.attention.version not in VERSIONS:
            raise ValueError(f"attention.version={cfg.attention.version}: the cuda ladder has versions {VERSIONS}")
        from kernels.cuda_build import require_cuda
        require_cuda("attention=cuda", device)

    @classmethod
    def variants(cls, name):
        return [(f"{name} v{v}", {"name": name, "version": v}) for v in VERSIONS]

    def attend(self, q, k, v, mask):
        if mask is not None:
            raise ValueError(MASK_ERROR)
        k, v = k.to(q.dtype), v.to(q.dtype)  # a cache may hold another dtype than autocast's q
        return CudaAttentionFn.apply(q, k, v, self.version, self.scale)
