"""The residual stream of kernels/triton_persistent.py, as its phases read it.

The stream is never rewritten in place. Per layer l the kernel keeps x_l (RES[l]) and two fp32
sums that programs add their shares into with atomics: XA[l] (every head's share of the
attention projection) and XM[l] (every hidden unit's share of the MLP's output). So

    x_l + attention_l = RES[l] + XA[l] (+ b_proj)                     (the MLP's input)
    x_(l+1)           = RES[l] + XA[l] + XM[l] (+ b_proj + b_proj2)    (the next layer's input)

and a phase reads what the phase before it summed, with no phase in between to gather it.
XA and XM are zeroed again in the sample phase, after their last reader. A phase of several
tiles or chunks reads those parts once a program, into XS, its own copy (_stats), and its tiles
read that. The parts written by other programs are read with cache_modifier=".cg": from L2,
never from a stale L1 line."""
import triton
import triton.language as tl


@triton.jit
def _stream(k0, RES, ACC, B_O, B_P2, j, n_a, n_m, NB: tl.constexpr, K: tl.constexpr, L: tl.constexpr,
            B_PAD: tl.constexpr, BK: tl.constexpr, HAS_BIAS: tl.constexpr):
    """Columns k0..k0+BK of RES[j] (+ XA[j] + b_proj[j] if n_a) (+ XM[j] + b_proj2[j] if n_m), zero
    outside the (NB, K) rows."""
    rows = tl.arange(0, B_PAD)
    offs_k = k0 + tl.arange(0, BK)
    k_ok = offs_k < K
    ok = (rows < NB)[:, None] & k_ok[None, :]
    at = (j * NB + rows[:, None]) * K + offs_k[None, :]
    a_ok = k_ok & (offs_k * 0 + n_a > 0)  # the flags as tensors: they are plain ints under the interpreter
    m_ok = k_ok & (offs_k * 0 + n_m > 0)
    x = tl.load(RES + at, mask=ok, other=0.0, cache_modifier=".cg")
    x += tl.load(ACC + at, mask=ok & a_ok[None, :], other=0.0, cache_modifier=".cg")
    x += tl.load(ACC + L * NB * K + at, mask=ok & m_ok[None, :], other=0.0, cache_modifier=".cg")
    if HAS_BIAS:
        x += tl.load(B_O + j * K + offs_k, mask=a_ok, other=0.0).to(tl.float32)[None, :]
        x += tl.load(B_P2 + j * K + offs_k, mask=m_ok, other=0.0).to(tl.float32)[None, :]
    return tl.where(ok, x, 0.0)


@triton.jit
def _normed_input(k0, mean, rstd, RES, ACC, B_O, B_P2, XS, j, n_a, n_m, store, LN_W, LN_B, eps, NB: tl.constexpr,
                  K: tl.constexpr, L: tl.constexpr, B_PAD: tl.constexpr, BK: tl.constexpr, ONE: tl.constexpr,
                  HAS_BIAS: tl.constexpr, HAS_LN_B: tl.constexpr):
    """LayerNorm of a chunk of the stream. With ONE the chunk is the whole row: the stream's parts
    are loaded here, the statistics come from them, and `store` also writes the stream itself as
    RES[j + 1]. Otherwise the chunk comes from XS, this program's own copy of the stream that _stats
    wrote."""
    rows = tl.arange(0, B_PAD)
    offs_k = k0 + tl.arange(0, BK)
    k_ok = offs_k < K
    ok = (rows < NB)[:, None] & k_ok[None, :]
    if ONE:
        x = _stream(k0, RES, ACC, B_O, B_P2, j, n_a, n_m, NB, K, L, B_PAD, BK, HAS_BIAS)
        tl.store(RES + ((j + 1) * NB + rows[:, None]) * K + offs_k[None, :], x,
                 mask=ok & (offs_k * 0 + store > 0)[None, :])
        mean = tl.sum(x, 1) / K
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, 1) / K - mean * mean + eps)
    else:
        x = tl.load(XS + rows[:, None] * K + offs_k[None, :], mask=ok, other=0.0)
    x = (x - mean[:, None]) * rstd[:, None] * tl.load(LN_W + offs_k, mask=k_ok, other=0.0).to(tl.float32)[None, :]
    if HAS_LN_B:
        x += tl.load(LN_B + offs_k, mask=k_ok, other=0.0).to(tl.float32)[None, :]
    return tl.where(ok, x, 0.0)


@triton.jit
def _stats(RES, ACC, B_O, B_P2, XS, j, n_a, n_m, store, eps, NB: tl.constexpr, K: tl.constexpr, L: tl.constexpr,
           B_PAD: tl.constexpr, BK: tl.constexpr, ONE: tl.constexpr, HAS_BIAS: tl.constexpr):
    """Each row's LayerNorm mean and 1 / std over the stream (one pass of sums, fp32); with ONE the
    matvec takes them from its one chunk instead. The pass also copies the stream into XS, this
    program's own (NB, K) block, which its tiles then read chunk by chunk: every program reading
    the stream's three parts again for every tile and chunk crowds the few L2 lines that hold
    them. `store`: also write the stream as RES[j + 1]."""
    s1 = tl.zeros([B_PAD], dtype=tl.float32)
    s2 = s1
    if not ONE:
        rows = tl.arange(0, B_PAD)
        for k0 in range(0, K, BK):
            offs_k = k0 + tl.arange(0, BK)
            ok = (rows < NB)[:, None] & (offs_k < K)[None, :]
            x = _stream(k0, RES, ACC, B_O, B_P2, j, n_a, n_m, NB, K, L, B_PAD, BK, HAS_BIAS)
            tl.store(XS + rows[:, None] * K + offs_k[None, :], x, mask=ok)
            tl.store(RES + ((j + 1) * NB + rows[:, None]) * K + offs_k[None, :], x,
                     mask=ok & (offs_k * 0 + store > 0)[None, :])
            s1 += tl.sum(x, 1)
            s2 += tl.sum(x * x, 1)
        tl.debug_barrier()  # the copy is read back by other threads of this program
    mean = s1 / K
    return mean, 1.0 / tl.sqrt(s2 / K - mean * mean + eps)
