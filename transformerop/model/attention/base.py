"""The attention contract every backend follows, and what a backend declares about itself.

A backend subclasses CausalSelfAttention and implements `attend(q, k, v, mask)` on tensors of
shape (B, H, T, D); the projections, head split and output projection are shared here so
backends differ only in the part being studied. A backend whose backward lays the q, k, v
gradients out as one buffer, as the heads are (packed_grads: the Triton one), gets its heads
from SplitHeads in training, which hands that buffer to c_attn with no copy; the others keep
autograd's split (a copy, and no Python in their backward). `mask` is None for plain causal attention
(queries are the last Tq positions of the Tk keys) or a bool tensor broadcastable to
(B, H, Tq, Tk), True where a query may attend (the static KV cache passes one).

Everything the rest of the tool needs to know about a backend is a class attribute or class
method here, overridden where it differs: dtypes, precision, cache and mask support, backward
kind, head dims, whether it materializes the T x T scores (the roofline's bytes), kernels per layer (the
prediction's launch term), its validation variants and tolerance. validate, predict, bench,
decode and the report ask the class; nothing else keeps a list of backend names.
"""
import math

import torch
import torch.nn as nn

from ...errors import BackendUnavailable  # noqa: F401  (re-exported: backends raise it)


def packed_strides(q, k, v) -> bool:
    """q, k, v (B, H, T, D) have the strides of heads of a (B, T, 3, H, D) buffer, as SplitHeads
    makes them: a backward may then lay their gradients out as one such buffer. Strides alone,
    so that the rule reads the same on fake tensors (torch.compile's tracing)."""
    B, H, T, D = q.shape
    return q.shape == k.shape == v.shape and q.stride() == k.stride() == v.stride() == (T * 3 * H * D, D, 3 * H * D, 1)


def packed_heads(q, k, v) -> bool:
    """q, k, v are, in that order, the heads of one (B, T, 3, H, D) buffer (real tensors)."""
    step = q.shape[1] * q.shape[3] * q.element_size()
    return (packed_strides(q, k, v) and q.dtype == k.dtype == v.dtype
            and k.data_ptr() - q.data_ptr() == step and v.data_ptr() - k.data_ptr() == step
            and q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr())


class SplitHeads(torch.autograd.Function):
    """c_attn's output (B, T, 3C) as q, k, v (B, H, T, D) views. Backward: their gradients as one
    (B, T, 3C) tensor -- that buffer itself, no copy, when they are views of one as the heads
    are (packed_heads: the Triton backward lays them out so), else one copy (a stack)."""

    @staticmethod
    def forward(ctx, qkv, n_head):
        B, T, C3 = qkv.shape
        ctx.shape = qkv.shape
        return tuple(t.view(B, T, n_head, C3 // 3 // n_head).transpose(1, 2) for t in qkv.split(C3 // 3, dim=2))

    @staticmethod
    def backward(ctx, dq, dk, dv):
        B, T, C3 = ctx.shape
        if dq is not None and dk is not None and dv is not None and packed_heads(dq, dk, dv):
            return dq.as_strided((B, T, C3), (T * C3, C3, 1)), None
        like = next(g for g in (dq, dk, dv) if g is not None)
        grads = [torch.zeros_like(like) if g is None else g for g in (dq, dk, dv)]
        return torch.stack([g.transpose(1, 2) for g in grads], dim=2).reshape(B, T, C3), None


def causal_mask(t_q: int, t_k: int, device) -> torch.Tensor:
    """(Tq, Tk) bool, True on and below the diagonal aligned to the bottom-right corner."""
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)


class CausalSelfAttention(nn.Module):
    supports_cache = True  # can attend one query against many cached keys
    accepts_mask = True  # attend(mask=...) works: the masked decode paths (preallocated caches) need it
    dtypes = ("float32", "bfloat16")
    backward = "autograd"  # what computes the gradient: autograd | kernel | reference
    fused = True  # never materializes the T x T scores in memory (the roofline's bytes)
    # computes only the scores a causal mask keeps (about half of T x T at Tq = Tk): the roofline's FLOPs
    skips_masked = True
    per_head_projections = False  # q, k, v from one c_attn matmul (True: a bias-free Linear per head)
    # the backward returns the q, k, v gradients as views of one (B, T, 3, H, D) buffer when they are
    # SplitHeads' views (packed_strides): training then splits the heads through SplitHeads
    packed_grads = False
    head_dims = None  # the head dims (n_embd / n_head) its kernels are built for; None: any

    def __init__(self, mcfg, acfg):
        super().__init__()
        assert mcfg.n_embd % mcfg.n_head == 0
        self.n_head, self.n_embd = mcfg.n_head, mcfg.n_embd
        self.head_dim = mcfg.n_embd // mcfg.n_head
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.dropout = mcfg.dropout
        self.c_attn = nn.Linear(mcfg.n_embd, 3 * mcfg.n_embd, bias=mcfg.bias)  # q, k, v in one matmul
        self.c_proj = nn.Linear(mcfg.n_embd, mcfg.n_embd, bias=mcfg.bias)
        self.resid_dropout = nn.Dropout(mcfg.dropout)

    @classmethod
    def precision(cls, dtype_name: str, acfg, device) -> str:
        """How this backend's matmuls round: bf16, tf32 (fp32 inputs on TF32 tensor cores) or ieee."""
        if dtype_name == "bfloat16":
            return "bf16"
        cuda = torch.device(device).type == "cuda"
        return "tf32" if cuda and torch.backends.cuda.matmul.allow_tf32 else "ieee"

    @classmethod
    def tolerance(cls, precision: str) -> float:
        """Max relative error against float64 that validate accepts (the one tolerance table)."""
        from ...measure.reference import TOLERANCE
        return TOLERANCE[precision]

    @classmethod
    def kernels_per_layer(cls, n_head: int, dropout: bool) -> int:
        """Kernels one layer's attend() launches eagerly: one fused kernel."""
        return 1

    @classmethod
    def kernel_warmups(cls, cfg, device) -> list:
        """Zero-argument calls launching this backend's own compiled kernels at the shapes a train
        step and an evaluation of cfg's model give them, made before the job's first step (GPT's
        kernel_warmups): none for a backend of torch's kernels."""
        return []

    @classmethod
    def variants(cls, name: str) -> list:
        """(label, attention config) rows task=validate checks for this backend."""
        return [(name, {"name": name})]

    @classmethod
    def check(cls, cfg, device: torch.device) -> None:
        """Raise before any work if this backend cannot serve cfg on device."""
        if cfg.train.dtype not in cls.dtypes:
            raise ValueError(f"attention={cfg.attention.name} supports train.dtype in {cls.dtypes}, "
                             f"not {cfg.train.dtype!r}")
        m = getattr(cfg, "model", None)
        if cls.head_dims is not None and m is not None and getattr(m, "n_layer", 1) > 0 and m.n_embd % m.n_head == 0 \
                and m.n_embd // m.n_head not in cls.head_dims:
            raise ValueError(f"attention={cfg.attention.name} has kernels for head dims {list(cls.head_dims)}, not "
                             f"model.n_embd / model.n_head = {m.n_embd}/{m.n_head} = {m.n_embd // m.n_head}: "
                             f"change model.n_head, or use a backend without that limit")

    def forward(self, x, cache=None):
        return self.resid_dropout(self.branch(x, cache))

    def branch(self, x, cache=None):
        """Attention and its output projection, before the residual dropout (model.fused_norm
        applies that in the next kernel)."""
        B, T, C = x.shape
        qkv = self.c_attn(x)
        # training, eager, packed_grads: SplitHeads' backward takes no copy (traced by torch.compile,
        # autograd's own split: its check reads data pointers, which fake tensors have not)
        if self.packed_grads and torch.is_grad_enabled() and qkv.requires_grad and not torch.compiler.is_compiling():
            q, k, v = SplitHeads.apply(qkv, self.n_head)
        else:
            q, k, v = (t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in qkv.split(C, dim=2))
        mask = None
        if cache is not None:
            k, v, mask = cache.update(k, v)  # all keys so far (and which of them are valid)
        y = self.attend(q, k, v, mask)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)

    def attend(self, q, k, v, mask):
        raise NotImplementedError
