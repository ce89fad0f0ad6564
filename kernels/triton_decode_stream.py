"""The residual stream of kernels/triton_persistent.py, as its phases read it.

The stream lives in one fp32 buffer of 2L + 1 slots, (2L + 1, NB, C). Phase p of a step (layer
l's attn phase is 2l, its mlp phase 2l + 1) reads slot p whole and adds into slot p + 1, with
atomics, its programs' shares of its output:

    slot 0        x_0 = wte[token] + wpe[pos]                (the sample phase writes it)
    slot 2l + 1   x_l + attention_l + b_proj                 (the MLP's input)
    slot 2l + 2   x_(l+1) = slot 2l + 1 + mlp_l + b_proj2      (the next layer's input; the head reads slot 2L)

The residual term itself, slot p (+ the bias of phase p's output), is one more share of slot
p + 1, which one program adds ("folds") as it reads slot p. So each phase reads one part of the
stream, not the three it would otherwise sum, and needs no phase in between to gather it. Slots
1..2L are zeroed again in the sample phase, after their last reader. A phase of several tiles
or chunks reads its slot once a program, into XS, its own copy (_stats), and its tiles read
that. The slots are written by other programs, so they are read with cache_modifier=".cg":
from L2, never from a stale L1 line."""
import triton
import triton.language as tl


@triton.jit
def _stream(k0, X, NXT, FOLD_B, fold, NB: tl.constexpr, K: tl.constexpr, B_PAD: tl.constexpr, BK: tl.constexpr,
            HAS_BIAS: tl.constexpr):
    """Columns k0..k0+BK of the stream slot X (NB, K), zero outside its rows; with `fold` also
    adds them (+ FOLD_B, the bias of the phase's output) into NXT, the next slot."""
    rows = tl.arange(0, B_PAD)
    offs_k = k0 + tl.arange(0, BK)
    k_ok = offs_k < K
    ok = (rows < NB)[:, None] & k_ok[None, :]
    at = rows[:, None] * K + offs_k[None, :]
    x = tl.load(X + at, mask=ok, other=0.0, cache_modifier=".cg")
    f_ok = k_ok & (offs_k * 0 + fold > 0)  # the flag as a tensor: it is a plain int under the interpreter
    share = x
    if HAS_BIAS:
        share += tl.load(FOLD_B + offs_k, mask=f_ok, other=0.0).to(tl.float32)[None, :]
    tl.atomic_add(NXT + at, share, mask=ok & f_ok[None, :], sem="relaxed", scope="gpu")
    return x


@triton.jit
def _normed_input(k0, mean, rstd, X, NXT, FOLD_B, fold, XS, LN_W, LN_B, eps, NB: tl.constexpr, K: tl.constexpr,
                  B_PAD: tl.constexpr, BK: tl.constexpr, ONE: tl.constexpr, HAS_BIAS: tl.constexpr,
                  HAS_LN_B: tl.constexpr):
    """LayerNorm of a chunk of the stream. With ONE the chunk is the whole row: it is loaded from
    the slot X here (and folded into NXT with `fold`), and the statistics come from it.
    Otherwise the chunk comes from XS, this program's own copy of the slot that _stats wrote."""
    rows = tl.arange(0, B_PAD)
    offs_k = k0 + tl.arange(0, BK)
    k_ok = offs_k < K
    ok = (rows < NB)[:, None] & k_ok[None, :]
    if ONE:
        x = _stream(k0, X, NXT, FOLD_B, fold, NB, K, B_PAD, BK, HAS_BIAS)
        mean = tl.sum(x, 1) / K
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, 1) / K - mean * mean + eps)
    else:
        x = tl.load(XS + rows[:, None] * K + offs_k[None, :], mask=ok, other=0.0)
    x = (x - mean[:, None]) * rstd[:, None] * tl.load(LN_W + offs_k, mask=k_ok, other=0.0).to(tl.float32)[None, :]
    if HAS_LN_B:
        x += tl.load(LN_B + offs_k, mask=k_ok, other=0.0).to(tl.float32)[None, :]
    return tl.where(ok, x, 0.0)


@triton.jit
def _stats(X, NXT, FOLD_B, fold, XS, eps, NB: tl.constexpr, K: tl.constexpr, B_PAD: tl.constexpr, BK: tl.constexpr,
           ONE: tl.constexpr, HAS_BIAS: tl.constexpr, STAGES: tl.constexpr):
    """Each row's LayerNorm mean and 1 / std over the stream slot X (one pass of sums, fp32; with
    `fold`, the pass also folds the slot into NXT); with ONE the matvec takes them from its one
    chunk instead. The pass also copies the slot into XS, this program's own (NB, K) block, which
    its tiles then read chunk by chunk: every program reading the slot again for every tile and
    chunk crowds the few L2 lines that hold it. STAGES chunks of the pass are in flight at once:
    each is a trip to L2, and the pass would otherwise wait for them one by one."""
    s1 = tl.zeros([B_PAD], dtype=tl.float32)
    s2 = s1
    if not ONE:
        rows = tl.arange(0, B_PAD)
        for k0 in tl.range(0, K, BK, num_stages=STAGES):
            offs_k = k0 + tl.arange(0, BK)
            ok = (rows < NB)[:, None] & (offs_k < K)[None, :]
            x = _stream(k0, X, NXT, FOLD_B, fold, NB, K, B_PAD, BK, HAS_BIAS)
            tl.store(XS + rows[:, None] * K + offs_k[None, :], x, mask=ok)
            s1 += tl.sum(x, 1)
            s2 += tl.sum(x * x, 1)
        tl.debug_barrier()  # the copy is read back by other threads of this program
    mean = s1 / K
    return mean, 1.0 / tl.sqrt(s2 / K - mean * mean + eps)
