"""Fused causal attention in Triton, FlashAttention-2 style: forward, backward, autograd (the
kernels themselves: kernels/triton_attention_kernels.py).

Tensors are (B, H, T, D) with any strides except a unit stride on D. Queries are the LAST Tq of
the Tk keys (bottom-right causal), so Tq=1 against a KV cache works. The forward writes O and
the base-2 log-sum-exp of each row; the backward recomputes P from it in ONE launch holding two
kinds of programs: dK/dV for a key tile and dQ for a query tile. Each forms delta = rowsum(dO*O)
for the rows it visits, so no preprocess launch is needed, and nothing uses atomics, so the
autotuner can re-run any kernel freely. (Measured on the H200: splitting dK/dV and dQ into two
launches, or a separate delta kernel, was slower at B 64, H 6, T 256, D 64.)

fp32 inputs go through tl.dot with TF32 tensor cores by default (allow_tf32=True); pass
allow_tf32=False for IEEE fp32. bf16/fp16 use their tensor cores with fp32 accumulation.
Attention dropout is fused (kernels/triton_dropout.py): the backward regenerates the forward's
mask from its seed; delta = rowsum(dO*O) still holds, since O is the dropped output. O and the
gradients are written in (B, T, H, D) memory order (see _bthd).

Autotuning is keyed on power-of-two buckets of (Tq, Tk) plus head dim, dtype, causal and
precision, so decoding (Tk grows by one each step) re-tunes only when Tk crosses a power of two.
After the first call for a key, the chosen config launches without the autotuner's per-call
Python: on the H200 the host launch path, not the GPU, bounded these µs-scale kernels. Under
TRITON_INTERPRET=1 (CPU tests) each kernel has a single config and nothing is timed.
"""
import functools
import math
import os

import torch

from transformerop.model.attention.base import packed_strides

from . import triton_key  # noqa: F401 -- a fresh process reads Triton's cache key, not re-hashes it
from .triton_attention_kernels import BWD_CONFIGS, FWD_CONFIGS, _bwd_atomic_kernel, _bwd_kernel, _fwd_kernel  # noqa: F401
from .triton_dropout import seed_tensor, threshold
from .triton_launch import launch

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
poison_outputs = False  # tests set True: outputs start NaN so an unwritten element fails
force_configs = None  # tests: (fwd, bwd) dicts of BLOCK_M/BLOCK_N/num_warps/num_stages, or None
LOG2E = 1.4426950408889634
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
FORWARDS = ("tl", "gluon")  # the forward kernels: this file's, kernels/gluon_attention.py's (sm_90)
# how the backward gets dQ: programs of its own that compute the scores and dP again (no atomics),
# or the dK/dV programs adding their share in fp32 atomics (five products a tile instead of seven)
DQ_MODES = ("query_tiles", "atomic")
stats = {"tl": 0, "gluon": 0}  # forwards run by each (kernel="gluon" runs tl where gluon cannot: decode)


@functools.cache
def _gluon():
    """kernels/gluon_attention.py, imported on first use: Gluon needs a Triton with its Hopper ops."""
    from . import gluon_attention
    return gluon_attention


def _empty(shape, dtype, device):
    if poison_outputs:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def _bthd(B, H, T, D, dtype, device):
    """A (B, H, T, D) output laid out as (B, T, H, D) in memory: the model's transpose(1, 2)
    .contiguous() after attention is then free, and so are the gradients' way back into the
    fused qkv projection (contiguous (B, H, T, D) grads cost 4 strided copies a layer)."""
    return _empty((B, T, H, D), dtype, device).transpose(1, 2)


# Plain integer math on the launch path: triton.next_power_of_2 and triton.cdiv are wrapped
# helpers that cost µs per call in Python, and each attention call makes several.
def _bucket(t):
    return 1 << (max(int(t), 1) - 1).bit_length()


def _cdiv(a, b):
    return -(-a // b)


def _grads_like(q, k, v):
    """dq, dk, dv laid out as their inputs: views of one (B, T, 3, H, D) buffer when q, k, v have
    the strides of one c_attn output's heads (packed_strides: the model's SplitHeads then hands
    that buffer on, no copy), else each (B, T, H, D) in memory (_bthd). The C++ launcher and the
    op's fake implementation follow the same rule."""
    B, H, t_q, D = q.shape
    if packed_strides(q, k, v):
        g = _empty((B, t_q, 3, H, D), q.dtype, q.device)
        return tuple(g[:, :, i].transpose(1, 2) for i in range(3))
    t_k = k.shape[2]
    return _bthd(B, H, t_q, D, q.dtype, q.device), *(_bthd(B, H, t_k, D, k.dtype, k.device) for _ in range(2))


def _unit_last(t):
    return t if t.stride(-1) == 1 else t.contiguous()


def _consts(D, causal, prec, seed):
    return dict(HEAD_DIM=D, CAUSAL=causal, PREC=prec, DROPOUT=seed is not None)


def _forward(q, k, v, causal, sm_scale, allow_tf32, p_drop=0.0, seed=None, kernel="tl"):
    B, H, t_q, D = q.shape
    t_k = k.shape[2]
    o = _bthd(B, H, t_q, D, q.dtype, q.device)
    lse = _empty((B * H, t_q), torch.float32, q.device)
    views = _gluon().plan(q, k, v, causal)[1] if kernel == "gluon" else None
    if views is not None:
        stats["gluon"] += 1
        return _gluon().forward(q, k, v, o, lse, sm_scale * LOG2E, p_drop, threshold(p_drop), seed, views)
    stats["tl"] += 1
    prec = "ieee" if q.dtype == torch.float32 and not allow_tf32 else "tf32"
    bq, bk, bh = _bucket(t_q), _bucket(t_k), _bucket(B * H)
    launch(_fwd_kernel, lambda c: (_cdiv(t_q, c["BLOCK_M"]), B * H),
           ("fwd", q.device, q.dtype, bq, bk, bh, D, causal, prec, seed is not None),
           force_configs and force_configs[0],
           (q, k, v, o, lse, lse if seed is None else seed, threshold(p_drop), 1.0 / (1.0 - p_drop), sm_scale * LOG2E,
            *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], H, t_q, t_k, bq, bk, bh),
           _consts(D, causal, prec, seed))
    return o, lse


def _backward(do, q, k, v, o, lse, causal, sm_scale, allow_tf32, p_drop=0.0, seed=None, dq_mode="query_tiles"):
    B, H, t_q, D = q.shape
    t_k = k.shape[2]
    dq, dk, dv = _grads_like(q, k, v)
    prec = "ieee" if q.dtype == torch.float32 and not allow_tf32 else "tf32"
    bq, bk, bh = _bucket(t_q), _bucket(t_k), _bucket(B * H)
    if dq_mode == "atomic":  # dQ added by the key tiles into an fp32 sum, then cast into place
        dqa = torch.zeros((B, t_q, H, D), dtype=torch.float32, device=q.device)
        launch(_bwd_atomic_kernel, lambda c: (_cdiv(t_k, c["BLOCK_M"]), B * H),
               ("bwd_atomic", q.device, q.dtype, bq, bk, bh, D, causal, prec, seed is not None),
               force_configs and force_configs[1],
               (q, k, v, do, o, lse, dqa, dk, dv, lse if seed is None else seed, threshold(p_drop),
                1.0 / (1.0 - p_drop), sm_scale, sm_scale * LOG2E, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
                *do.stride()[:3], *dk.stride()[:3], H, t_q, t_k, bq, bk, bh), _consts(D, causal, prec, seed))
        dq.copy_(dqa.transpose(1, 2))
        return dq, dk, dv
    launch(_bwd_kernel, lambda c: (_cdiv(t_k, c["BLOCK_M"]) + _cdiv(t_q, c["BLOCK_M"]), B * H),
           ("bwd", q.device, q.dtype, bq, bk, bh, D, causal, prec, seed is not None),
           force_configs and force_configs[1],
           (q, k, v, do, o, lse, dq, dk, dv, lse if seed is None else seed, threshold(p_drop), 1.0 / (1.0 - p_drop),
            sm_scale, sm_scale * LOG2E, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3],
            *dq.stride()[:3], *dk.stride()[:3], H, t_q, t_k, bq, bk, bh), _consts(D, causal, prec, seed))
    return dq, dk, dv


class TritonAttentionFn(torch.autograd.Function):
    """dropout(softmax(q k^T * scale + causal)) v with Triton forward and backward kernels."""

    @staticmethod
    def forward(ctx, q, k, v, causal=True, sm_scale=None, allow_tf32=True, dropout_p=0.0, seed=None, kernel="tl",
                dq_mode="query_tiles"):
        q, k, v = _check(q, k, v, causal, dropout_p)
        sm_scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
        seed = seed_tensor(seed, q.device) if dropout_p > 0 else None
        o, lse = _forward(q, k, v, causal, sm_scale, allow_tf32, dropout_p, seed, kernel)
        ctx.save_for_backward(q, k, v, o, lse, seed)
        ctx.causal, ctx.sm_scale, ctx.allow_tf32, ctx.dropout_p = causal, sm_scale, allow_tf32, dropout_p
        ctx.dq_mode = dq_mode
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse, seed = ctx.saved_tensors
        do = _unit_last(do.to(o.dtype))
        dq, dk, dv = _backward(do, q, k, v, o, lse, ctx.causal, ctx.sm_scale, ctx.allow_tf32, ctx.dropout_p, seed,
                               ctx.dq_mode)
        return dq, dk, dv, None, None, None, None, None, None, None


def _check(q, k, v, causal, dropout_p=0.0):
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p={dropout_p}: need 0 <= p < 1")
    if q.dim() != 4 or k.shape != v.shape or k.dim() != 4 or q.shape[:2] != k.shape[:2] \
            or q.shape[3] != k.shape[3]:
        raise ValueError(f"expected q (B,H,Tq,D), k = v (B,H,Tk,D); got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    D, t_q, t_k = q.shape[3], q.shape[2], k.shape[2]
    if D not in (16, 32, 64, 128):
        raise ValueError(f"triton attention supports head dim 16, 32, 64 or 128, not {D}")
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"triton attention takes float32/bfloat16/float16 q, k, v of one dtype; "
                         f"got {q.dtype}, {k.dtype}, {v.dtype}")
    if t_q < 1 or t_k < 1 or (causal and t_q > t_k):
        raise ValueError(f"need 1 <= Tq <= Tk for causal attention; got Tq={t_q}, Tk={t_k}")
    if not INTERPRET and q.device.type != "cuda":
        raise ValueError("triton attention runs on CUDA tensors (or CPU ones under TRITON_INTERPRET=1)")
    return _unit_last(q), _unit_last(k), _unit_last(v)


def attention(q, k, v, causal=True, sm_scale=None, allow_tf32=True, dropout_p=0.0, seed=None, forward="tl",
              dq="query_tiles"):
    """Fused attention on (B, H, T, D) tensors; causal aligns queries to the last Tq keys.

    allow_tf32 (default True) lets fp32 matmuls use TF32 tensor cores (~1e-3 relative error);
    False keeps IEEE fp32. sm_scale defaults to 1/sqrt(D). dropout_p drops attention
    probabilities (kept ones scaled by 1/(1-p)), with a fresh seed from torch's RNG per call
    unless `seed` (an int) is given. forward="gluon" runs the forward kernel of
    kernels/gluon_attention.py where it can (unsupported() says where not: decode's Tq < Tk runs
    this file's). dq: how the backward gets dQ (DQ_MODES). Differentiable in q, k and v.
    """
    if forward not in FORWARDS:
        raise ValueError(f"forward={forward!r}: choose one of {FORWARDS}")
    if dq not in DQ_MODES:
        raise ValueError(f"dq={dq!r}: choose one of {DQ_MODES}")
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return TritonAttentionFn.apply(q, k, v, causal, sm_scale, allow_tf32, dropout_p, seed, forward, dq)
    q, k, v = _check(q, k, v, causal, dropout_p)  # inference (decode): no autograd bookkeeping
    sm_scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
    seed = seed_tensor(seed, q.device) if dropout_p > 0 else None
    return _forward(q, k, v, causal, sm_scale, allow_tf32, dropout_p, seed, forward)[0]
