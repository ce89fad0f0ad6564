"""model.fused_head: the tied LM head and its cross-entropy as two Triton kernels, forward and
backward.

Unfused, a batch's loss runs the head's matmul (bf16 logits), a cast to fp32, log-softmax and the
NLL, then their backward (NLL, log-softmax, the cast, the head's two matmuls) and autocast's cast
of the tied weight and of its gradient: about ten small kernels a step, the cross-entropy's four
~41 µs of them on the H200 at 16,384 tokens x 65 (the NLL's forward sums in one block). Here:

  forward   a program a block of BLOCK_M rows: z = x W^T on the tensor cores (W read in x's dtype,
            as autocast casts it), the rows' log-sum-exp (kept for the backward) and loss
            lse - z[target]; each program writes its loss sum and its count of scored rows, and
            the loss is their ratio (two small reductions, no atomics: the same every run)
  backward  z again, g = (softmax(z) - onehot(target)) * dloss / count, dx = g W, and g itself
            (tokens x V, x's dtype) for one cuBLAS matmul dW = g^T x

so the logits never reach memory. The logits stay fp32 where the unfused path rounds them to bf16
(a slightly different rounding, not the same arithmetic). Targets of -1 are not scored (addition's
prompts), as F.cross_entropy(ignore_index=-1). The vocabulary's tile is VP = 128 (or 256) wide:
character vocabularies; a larger one keeps the unfused head (GPT.fused_head)."""
import torch
import triton
import triton.language as tl

from transformerop.model.split_k import t_matmul

from . import triton_key  # noqa: F401 -- a fresh process reads Triton's cache key, not re-hashes it

# rows a program, the reduction chunk over C, warps, pipeline depth: the tile at which ptxas (sm_90,
# Triton 3.6) keeps both kernels within 255 registers with no spills at VP 128 and 256 (4 warps or
# 64-wide chunks spilled up to 1.8 KB a thread)
BLOCK_M, BK, WARPS, STAGES = 64, 32, 8, 1
MAX_VOCAB = 256


def vocab_tile(V: int) -> int:
    """The kernels' vocabulary tile: two sizes only, so that warm-ups need not know the data's vocabulary."""
    return 128 if V <= 128 else 256


@triton.jit
def _logits(X, W, rows, row_ok, C, V, BLOCK_M: tl.constexpr, VP: tl.constexpr, BK: tl.constexpr,
            PREC: tl.constexpr):
    """z = X[rows] W^T, fp32 (BLOCK_M, VP), columns past V zero."""
    offs_v = tl.arange(0, VP)
    z = tl.zeros([BLOCK_M, VP], dtype=tl.float32)
    for k0 in range(0, C, BK):
        offs_k = k0 + tl.arange(0, BK)
        k_ok = offs_k < C
        x = tl.load(X + rows[:, None] * C + offs_k[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(W + offs_v[:, None] * C + offs_k[None, :], mask=(offs_v < V)[:, None] & k_ok[None, :], other=0.0)
        z = tl.dot(x, tl.trans(w.to(x.dtype)), z, input_precision=PREC)
    return z


@triton.jit(do_not_specialize=["n_rows", "V"])
def _head_fwd(X, W, TGT, LSE, PART, n_rows, C, V, BLOCK_M: tl.constexpr, VP: tl.constexpr, BK: tl.constexpr,
              PREC: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    offs_v = tl.arange(0, VP)
    z = _logits(X, W, rows, row_ok, C, V, BLOCK_M, VP, BK, PREC)
    z = tl.where((offs_v < V)[None, :], z, float("-inf"))
    m = tl.max(z, 1)
    lse = m + tl.log(tl.sum(tl.exp(z - m[:, None]), 1))
    tgt = tl.load(TGT + rows, mask=row_ok, other=-1)
    scored = row_ok & (tgt >= 0)
    z_t = tl.sum(tl.where(offs_v[None, :] == tgt[:, None], z, 0.0), 1)
    loss = tl.where(scored, lse - z_t, 0.0)
    tl.store(LSE + rows, lse, mask=row_ok)
    tl.store(PART + 2 * pid, tl.sum(loss, 0))
    tl.store(PART + 2 * pid + 1, tl.sum(scored.to(tl.float32), 0))


@triton.jit(do_not_specialize=["n_rows", "V"])
def _head_bwd(X, W, TGT, LSE, SCALE, DX, G, n_rows, C, V, BLOCK_M: tl.constexpr, VP: tl.constexpr,
              BK: tl.constexpr, PREC: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    offs_v = tl.arange(0, VP)
    v_ok = offs_v < V
    z = _logits(X, W, rows, row_ok, C, V, BLOCK_M, VP, BK, PREC)
    lse = tl.load(LSE + rows, mask=row_ok, other=0.0)
    tgt = tl.load(TGT + rows, mask=row_ok, other=-1)
    scored = row_ok & (tgt >= 0)
    p = tl.where(v_ok[None, :], tl.exp(z - lse[:, None]), 0.0)
    hit = (offs_v[None, :] == tgt[:, None]).to(tl.float32)
    g = tl.where(scored[:, None], p - hit, 0.0) * tl.load(SCALE)
    g = g.to(X.dtype.element_ty)  # what both products read: the dtype autocast hands the head's matmuls
    tl.store(G + rows[:, None] * V + offs_v[None, :], g, mask=row_ok[:, None] & v_ok[None, :])
    for k0 in range(0, C, BK):  # dx = g W, a chunk of C at a time
        offs_k = k0 + tl.arange(0, BK)
        k_ok = offs_k < C
        w = tl.load(W + offs_v[:, None] * C + offs_k[None, :], mask=v_ok[:, None] & k_ok[None, :], other=0.0)
        dx = tl.dot(g, w.to(g.dtype), input_precision=PREC)
        tl.store(DX + rows[:, None] * C + offs_k[None, :], dx.to(DX.dtype.element_ty),
                 mask=row_ok[:, None] & k_ok[None, :])


def _prec(dtype) -> str:
    return "ieee" if dtype == torch.float32 else "tf32"  # fp32 as torch's matmul (no TF32 unless allowed)


def _forward(x, w, tgt):
    n, C = x.shape
    V = w.shape[0]
    grid = triton.cdiv(n, BLOCK_M)
    lse = torch.empty(n, dtype=torch.float32, device=x.device)
    part = torch.empty(grid, 2, dtype=torch.float32, device=x.device)
    _head_fwd[(grid,)](x, w, tgt, lse, part, n, C, V, BLOCK_M=BLOCK_M, VP=vocab_tile(V), BK=BK, PREC=_prec(x.dtype),
                       num_warps=WARPS, num_stages=STAGES)
    return lse, part.sum(0)


def _backward(x, w, tgt, lse, scale):
    n, C = x.shape
    V = w.shape[0]
    dx = torch.empty_like(x)
    g = torch.empty(n, V, dtype=x.dtype, device=x.device)
    _head_bwd[(triton.cdiv(n, BLOCK_M),)](x, w, tgt, lse, scale, dx, g, n, C, V, BLOCK_M=BLOCK_M, VP=vocab_tile(V),
                                          BK=BK, PREC=_prec(x.dtype), num_warps=WARPS, num_stages=STAGES)
    return dx, t_matmul(g, x).to(w.dtype)  # g^T x with every SM busy


class HeadLossFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, tgt):
        lse, totals = _forward(x, w, tgt)
        ctx.save_for_backward(x, w, tgt, lse, totals)
        return totals[0] / totals[1]

    @staticmethod
    def backward(ctx, dloss):
        x, w, tgt, lse, totals = ctx.saved_tensors
        scale = (dloss / totals[1]).reshape(1).float()  # a device scalar: no host sync in a graph
        dx, dw = _backward(x, w, tgt, lse, scale)
        return dx, dw, None


def head_loss(x, weight, targets):
    """Mean cross-entropy of logits x weight^T against targets (-1: not scored), x (..., C) read in
    autocast's dtype where autocast is on (as the head's Linear would cast it)."""
    dev = x.device.type
    if torch.is_autocast_enabled(dev):
        x = x.to(torch.get_autocast_dtype(dev))
    C = x.shape[-1]
    return HeadLossFn.apply(x.reshape(-1, C).contiguous(), weight.contiguous(), targets.reshape(-1).contiguous())


def warmups(C: int, x_dtype, device) -> list:
    """Zero-argument calls launching each form of the two kernels at width C on 16 rows of zeros
    (the vocabulary is a runtime length: the tile of a character vocabulary, VP = 128), made
    before a job's first step (transformerop/cuda_early.py)."""
    n, V = 16, 16
    x = torch.zeros(n, C, dtype=x_dtype, device=device)
    w = torch.zeros(V, C, dtype=torch.float32, device=device)
    tgt = torch.zeros(n, dtype=torch.int64, device=device)

    def backward():
        _backward(x, w, tgt, torch.zeros(n, device=device), torch.ones(1, device=device))
    return [lambda: _forward(x, w, tgt), backward]
