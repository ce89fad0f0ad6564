"""train.fused_step: the held weights' clip and AdamW step as two Triton kernels over flat buffers
(transformerop/master_weights.py lays the fp32 masters, their gradients, AdamW's two moments and
the model's bf16 copies out as one buffer each, every tensor's segment padded to a whole BLOCK).

Unfused, a step with master weights reads and writes the fp32 gradients for the clip's norm and
scale, AdamW reads the weight, gradient and both moments and writes three, then a copy rounds the
weights into the bf16 copies: about 46 bytes a weight in ~10 launches. Here:

  _sq_sums      each BLOCK's sum of squared gradients (the clip's norm, with the other
                parameters' added outside): 4 bytes a weight
  _adamw_step   g * clip coefficient, decoupled weight decay, both moments, bias correction,
                the update, and the bf16 copy written beside the fp32 master: 30 bytes a weight

The arithmetic follows torch._fused_adamw_ (torch.optim.AdamW(fused=True)) step for step, in fp32;
the order of a few operations differs, so the weights agree to fp32 rounding, not bit for bit. The
learning rate, step count and clip coefficient are device scalars, so a CUDA graph replays them."""
import torch
import triton
import triton.language as tl

from . import triton_key  # noqa: F401 -- a fresh process reads Triton's cache key, not re-hashes it

BLOCK = 4096  # elements a program; each held tensor's flat segment is padded to a multiple of it


@triton.jit
def _sq_sums(G, PART, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    g = tl.load(G + i * BLOCK + tl.arange(0, BLOCK))
    tl.store(PART + i, tl.sum(g * g, 0))


@triton.jit
def _adamw_step(G, P, M, V, W16, DECAY, LR, STEP, COEF, beta1, beta2, eps, weight_decay, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    offs = i * BLOCK + tl.arange(0, BLOCK)
    lr = tl.load(LR)
    step = tl.load(STEP)
    g = tl.load(G + offs) * tl.load(COEF)
    p = tl.load(P + offs)
    p = p * (1.0 - lr * weight_decay * tl.load(DECAY + i))  # decoupled decay: matrices only
    m = beta1 * tl.load(M + offs) + (1.0 - beta1) * g
    v = beta2 * tl.load(V + offs) + (1.0 - beta2) * g * g
    bias1 = 1.0 - tl.exp2(step * tl.log2(beta1))  # 1 - beta^step
    bias2 = 1.0 - tl.exp2(step * tl.log2(beta2))
    p = p - (lr / bias1) * m / (tl.sqrt(v) / tl.sqrt(bias2) + eps)
    tl.store(P + offs, p)
    tl.store(M + offs, m)
    tl.store(V + offs, v)
    tl.store(W16 + offs, p.to(W16.dtype.element_ty))


@triton.jit
def _copies(P, W16, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(W16 + offs, tl.load(P + offs).to(W16.dtype.element_ty))


def copies(p: torch.Tensor, w16: torch.Tensor) -> None:
    """w16 = p rounded, as _adamw_step writes it (a checkpoint's masters into the model's copies)."""
    _copies[(p.numel() // BLOCK,)](p, w16, BLOCK=BLOCK, num_warps=8)


def grad_sq_sum(g: torch.Tensor) -> torch.Tensor:
    """Sum of squares of the flat fp32 gradient buffer (its length a multiple of BLOCK), a 0-d tensor."""
    blocks = g.numel() // BLOCK
    part = torch.empty(blocks, dtype=torch.float32, device=g.device)
    _sq_sums[(blocks,)](g, part, BLOCK=BLOCK, num_warps=8)
    return part.sum()


def adamw_step(g, p, m, v, w16, decay, lr, step, coef, beta1: float, beta2: float, eps: float,
               weight_decay: float) -> None:
    """One AdamW step over the flat buffers, in place; decay: a 0/1 flag per BLOCK; lr, step, coef:
    0-d fp32 device tensors (step already counts this one)."""
    _adamw_step[(p.numel() // BLOCK,)](g, p, m, v, w16, decay, lr, step, coef, float(beta1), float(beta2),
                                       float(eps), float(weight_decay), BLOCK=BLOCK, num_warps=8)


def warmups(device, w16_dtype) -> list:
    """Zero-argument calls launching both kernels on one BLOCK of zeros (before a job's first step)."""
    z = torch.zeros(BLOCK, device=device)
    one = torch.ones((), device=device)
    w16 = torch.zeros(BLOCK, dtype=w16_dtype, device=device)
    return [lambda: grad_sq_sum(z),
            lambda: adamw_step(z, z.clone(), z.clone(), z.clone(), w16, z[:1].clone(), one, one, one, 0.9, 0.99,
                               1e-8, 0.1)]
