"""The fused decode step: one token through the GPT in 5 Triton kernels per layer.

Batch-1 decode is a chain of ~100 tiny launches (LayerNorm, three matvecs, split, cache writes,
attention, adds, GELU ...), each far below a microsecond of real work, so the step is launch
bound. Here each layer is:
  1. ln_matvec   qkv = LN1(x) @ W_attn^T + b          (LayerNorm fused into the matvec prologue)
  2. attn_decode y   = softmax(q K^T / sqrt(D)) V     (writes the new k, v into the static cache)
  3. ln_matvec   x   = x + y @ W_proj^T + b           (residual fused into the epilogue)
  4. ln_matvec   h   = GELU(LN2(x) @ W_fc^T + b)
  5. ln_matvec   x   = x + h @ W_proj2^T + b
and the logits are one more ln_matvec (final LayerNorm + tied LM head). Matvecs are row-times-tile
reductions (no tl.dot: a single query row is below the tensor cores' minimum tile); every sum
accumulates in fp32. decode.py captures the whole step in one CUDA graph.
"""
import triton
import triton.language as tl

from . import triton_key  # noqa: F401 -- a fresh process reads Triton's cache key, not re-hashes it


@triton.jit
def _ln_matvec_kernel(X, LN_W, LN_B, W, BIAS, R, Y, C, N, eps,
                      HAS_LN: tl.constexpr, HAS_LN_B: tl.constexpr, HAS_BIAS: tl.constexpr,
                      GELU: tl.constexpr, RESID: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Y[b, n] = (R[b, n] +) act(sum_k LN(X[b])[k] * W[n, k] + BIAS[n]) for BLOCK_N outputs n."""
    b = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    x_row = X + b * C
    if HAS_LN:  # row statistics first (C is small: one or two passes over a few hundred values)
        s1 = tl.zeros([BLOCK_K], dtype=tl.float32)
        s2 = tl.zeros([BLOCK_K], dtype=tl.float32)
        for k0 in range(0, C, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            x = tl.load(x_row + offs_k, mask=offs_k < C, other=0.0).to(tl.float32)
            s1 += x
            s2 += x * x
        mean = tl.sum(s1, 0) / C
        rstd = 1.0 / tl.sqrt(tl.sum(s2, 0) / C - mean * mean + eps)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for k0 in range(0, C, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < C
        x = tl.load(x_row + offs_k, mask=k_ok, other=0.0).to(tl.float32)
        if HAS_LN:
            x = (x - mean) * rstd * tl.load(LN_W + offs_k, mask=k_ok, other=0.0).to(tl.float32)
            if HAS_LN_B:
                x += tl.load(LN_B + offs_k, mask=k_ok, other=0.0).to(tl.float32)
            x = tl.where(k_ok, x, 0.0)
        w = tl.load(W + offs_n[:, None] * C + offs_k[None, :], mask=n_ok[:, None] & k_ok[None, :],
                    other=0.0).to(tl.float32)
        acc += tl.sum(w * x[None, :], 1)
    if HAS_BIAS:
        acc += tl.load(BIAS + offs_n, mask=n_ok, other=0.0).to(tl.float32)
    if GELU:  # exact (erf) GELU, as F.gelu
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    if RESID:
        acc += tl.load(R + b * N + offs_n, mask=n_ok, other=0.0).to(tl.float32)
    tl.store(Y + b * N + offs_n, acc.to(Y.dtype.element_ty), mask=n_ok)


@triton.jit
def _attn_decode_kernel(QKV, KC, VC, POS, Y, H, D, W, scale,
                        BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """One (batch row, head): append this token's k, v at slot POS of the (B, H, W, D) caches and
    attend its q over slots 0..POS. The new key enters the online softmax from registers, so no
    program reads back what it just stored."""
    pid = tl.program_id(0)
    b, h = pid // H, pid % H
    C = H * D
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    row = QKV + b * 3 * C + h * D
    q = tl.load(row + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    k_new = tl.load(row + C + offs_d, mask=d_ok, other=0.0)
    v_new = tl.load(row + 2 * C + offs_d, mask=d_ok, other=0.0)
    pos = tl.load(POS)
    base = (b * H + h) * W * D
    tl.store(KC + base + pos * D + offs_d, k_new.to(KC.dtype.element_ty), mask=d_ok)
    tl.store(VC + base + pos * D + offs_d, v_new.to(VC.dtype.element_ty), mask=d_ok)
    # running max m, normaliser l and accumulator start from the new key alone
    m = tl.sum(q * k_new.to(KC.dtype.element_ty).to(tl.float32), 0) * scale
    l = m * 0.0 + 1.0  # same type as m: both are carried through the loop
    acc = v_new.to(VC.dtype.element_ty).to(tl.float32)
    for t0 in range(0, pos, BLOCK_T):
        offs_t = t0 + tl.arange(0, BLOCK_T)
        t_ok = offs_t < pos
        kv_ok = t_ok[:, None] & d_ok[None, :]
        k = tl.load(KC + base + offs_t[:, None] * D + offs_d[None, :], mask=kv_ok, other=0.0).to(tl.float32)
        s = tl.where(t_ok, tl.sum(k * q[None, :], 1) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m - m_new)
        v = tl.load(VC + base + offs_t[:, None] * D + offs_d[None, :], mask=kv_ok, other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, 0)
        l = l * alpha + tl.sum(p, 0)
        m = m_new
    tl.store(Y + b * C + h * D + offs_d, (acc / l).to(Y.dtype.element_ty), mask=d_ok)


def ln_matvec(x, weight, y, ln=None, bias=None, resid=None, gelu=False, block_n=32, block_k=128):
    """y = (resid +) act(LN(x) @ weight^T + bias): x (B, C), weight (N, C), y (B, N)."""
    B, C = x.shape
    N = weight.shape[0]
    dummy = weight  # never read when its flag is off
    _ln_matvec_kernel[(B, triton.cdiv(N, block_n))](
        x, ln.weight if ln is not None else dummy,
        ln.bias if ln is not None and ln.bias is not None else dummy,
        weight, bias if bias is not None else dummy, resid if resid is not None else y, y, C, N,
        ln.eps if ln is not None else 0.0,
        HAS_LN=ln is not None, HAS_LN_B=ln is not None and ln.bias is not None, HAS_BIAS=bias is not None,
        GELU=gelu, RESID=resid is not None, BLOCK_N=block_n, BLOCK_K=min(block_k, triton.next_power_of_2(C)))
    return y


def attn_decode(qkv, k_cache, v_cache, pos, y, scale: float):
    """qkv (B, 3C) of the new token, caches (B, H, W, D), pos a 0-d long device tensor; y (B, C)."""
    B, H, W, D = k_cache.shape
    _attn_decode_kernel[(B * H,)](qkv, k_cache, v_cache, pos, y, H, D, W, scale,
                                  BLOCK_T=min(64, triton.next_power_of_2(W)), BLOCK_D=triton.next_power_of_2(D))
    return y
