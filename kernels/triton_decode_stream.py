"""The residual stream of kernels/triton_persistent.py, as its phases read it.

The stream lives in one fp32 buffer of 2L + 1 slots, each in REPS copies, (2L + 1, REPS, NB, C).
Phase p of a step (layer l's attn phase is 2l, its mlp phase 2l + 1) reads slot p whole and adds
into slot p + 1, with atomics, its programs' shares of its output:

    slot 0        x_0 = wte[token] + wpe[pos]                (the sample phase writes it)
    slot 2l + 1   x_l + attention_l + b_proj                 (the MLP's input)
    slot 2l + 2   x_(l+1) = slot 2l + 1 + mlp_l + b_proj2      (the next layer's input; the head reads slot 2L)

Every program of the MLP adds its share into the same C floats of a row, and atomics queued on
the same addresses from every SM cost about 1 us more a phase than the barrier alone on the H200
(experiments/results/h200-2026-12-04b); so the MLP's programs add into the REPS copies of its
slot by turns (program % REPS) and a reader of an even slot sums its copies, in one round of
loads. The attention's slots (odd) take few adds an address and are read as one copy (REPS=1
for their reader); copies nobody adds into stay zero. The residual term itself, slot p (+ the
bias of phase p's output), is one more share of slot p + 1, which one program adds ("folds") as
it reads slot p. So each phase reads one part of the
stream, not the three it would otherwise sum, and needs no phase in between to gather it. Slots
1..2L are zeroed again in the sample phase, after their last reader. A phase of several tiles
or chunks reads its slot once a program, into XS, its own copy (_stats), and its tiles read
that. The slots are written by other programs, so they are read with cache_modifier=".cg":
from L2, never from a stale L1 line.

A phase with FOLD (COPY or SLOT; 0: the pass above) moves its LayerNorm past its products:
LN(x) W^T + b = rstd (x*g W^T - mean u) + c, with u = W g and c = W beta + b for each output
(decode/persistent.py works them out once, in float64, from the weights the kernel reads). Its
tiles read the slot raw, scaled by g (_raw_chunk), and gather each row's sums from the same
chunks, so no pass over the slot comes before the first product. With x far from zero mean,
x*g W^T - mean u cancels more than the centred form: the error grows by about |x| / |x - mean|.
The multiply-add form (batch 1) and fp32 weights keep x*g in fp32; the tensor-core form rounds
it to the weights' dtype first (bf16: 8 bits of |x|, not of |x - mean|). The parity gate, against
the float64 model, decides whether that holds for a model."""
import triton
import triton.language as tl

# FOLD's forms (module constants a @triton.jit body reads must be tl.constexpr): the first tile
# copies the slot into XS for a program's later tiles, or every tile reads the slot itself
COPY = tl.constexpr(1)
SLOT = tl.constexpr(2)


@triton.jit
def _stream(k0, X, NXT, FOLD_B, fold, NB: tl.constexpr, K: tl.constexpr, B_PAD: tl.constexpr, BK: tl.constexpr,
            HAS_BIAS: tl.constexpr, REPS: tl.constexpr):
    """Columns k0..k0+BK of the stream slot X (NB, K), the sum of its first REPS copies, zero
    outside its rows; with `fold` also adds them (+ FOLD_B, the bias of the phase's output) into
    NXT, the next slot's first copy."""
    rows = tl.arange(0, B_PAD)
    offs_k = k0 + tl.arange(0, BK)
    k_ok = offs_k < K
    ok = (rows < NB)[:, None] & k_ok[None, :]
    at = rows[:, None] * K + offs_k[None, :]
    x = tl.load(X + at, mask=ok, other=0.0, cache_modifier=".cg")
    for r in tl.static_range(1, REPS):  # the copies the MLP's programs added into by turns
        x += tl.load(X + r * NB * K + at, mask=ok, other=0.0, cache_modifier=".cg")
    f_ok = k_ok & (offs_k * 0 + fold > 0)  # the flag as a tensor: it is a plain int under the interpreter
    share = x
    if HAS_BIAS:
        share += tl.load(FOLD_B + offs_k, mask=f_ok, other=0.0).to(tl.float32)[None, :]
    tl.atomic_add(NXT + at, share, mask=ok & f_ok[None, :], sem="relaxed", scope="gpu")
    return x


@triton.jit
def _normed_input(k0, mean, rstd, X, NXT, FOLD_B, fold, XS, LN_W, LN_B, eps, NB: tl.constexpr, K: tl.constexpr,
                  B_PAD: tl.constexpr, BK: tl.constexpr, ONE: tl.constexpr, HAS_BIAS: tl.constexpr,
                  HAS_LN_B: tl.constexpr, REPS: tl.constexpr):
    """LayerNorm of a chunk of the stream. With ONE the chunk is the whole row: it is loaded from
    the slot X here (and folded into NXT with `fold`), and the statistics come from it.
    Otherwise the chunk comes from XS, this program's own copy of the slot that _stats wrote."""
    rows = tl.arange(0, B_PAD)
    offs_k = k0 + tl.arange(0, BK)
    k_ok = offs_k < K
    ok = (rows < NB)[:, None] & k_ok[None, :]
    if ONE:
        x = _stream(k0, X, NXT, FOLD_B, fold, NB, K, B_PAD, BK, HAS_BIAS, REPS)
        mean, rstd = _moments(tl.sum(x, 1), tl.sum(x * x, 1), K, eps)
    else:
        x = tl.load(XS + rows[:, None] * K + offs_k[None, :], mask=ok, other=0.0)
    x = (x - mean[:, None]) * rstd[:, None] * tl.load(LN_W + offs_k, mask=k_ok, other=0.0).to(tl.float32)[None, :]
    if HAS_LN_B:
        x += tl.load(LN_B + offs_k, mask=k_ok, other=0.0).to(tl.float32)[None, :]
    return tl.where(ok, x, 0.0)


@triton.jit
def _stats(X, NXT, FOLD_B, fold, XS, eps, NB: tl.constexpr, K: tl.constexpr, B_PAD: tl.constexpr, BK: tl.constexpr,
           ONE: tl.constexpr, HAS_BIAS: tl.constexpr, STAGES: tl.constexpr, REPS: tl.constexpr):
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
            x = _stream(k0, X, NXT, FOLD_B, fold, NB, K, B_PAD, BK, HAS_BIAS, REPS)
            tl.store(XS + rows[:, None] * K + offs_k[None, :], x, mask=ok)
            s1 += tl.sum(x, 1)
            s2 += tl.sum(x * x, 1)
        tl.debug_barrier()  # the copy is read back by other threads of this program
    return _moments(s1, s2, K, eps)


@triton.jit
def _moments(s1, s2, K: tl.constexpr, eps):
    """Each row's mean and 1 / std from its sums s1 = sum x and s2 = sum x^2 over K columns."""
    mean = s1 / K
    return mean, 1.0 / tl.sqrt(s2 / K - mean * mean + eps)


@triton.jit
def _raw_chunk(k0, X, NXT, FOLD_B, fold, XS, LN_W, first, keep, NB: tl.constexpr, K: tl.constexpr,
               B_PAD: tl.constexpr, BK: tl.constexpr, HAS_BIAS: tl.constexpr, FOLD: tl.constexpr,
               REPS: tl.constexpr):
    """FOLD: columns k0..k0+BK of the slot, not normalised, and the same times g (LN_W), folded
    into NXT with `fold`. FOLD == SLOT: every tile reads them from the slot X. FOLD == COPY: a
    program's `first` tile reads them from X and, when it has more tiles (`keep`), copies them
    into XS, its own copy, which its later tiles read instead (as _stats's copy); plan (in
    decode/persistent.py) chooses by measurement."""
    rows = tl.arange(0, B_PAD)
    offs_k = k0 + tl.arange(0, BK)
    k_ok = offs_k < K
    if FOLD == SLOT:
        x = _stream(k0, X, NXT, FOLD_B, fold, NB, K, B_PAD, BK, HAS_BIAS, REPS)
    else:
        ok = (rows < NB)[:, None] & k_ok[None, :]
        at = rows[:, None] * K + offs_k[None, :]
        if first:
            x = _stream(k0, X, NXT, FOLD_B, fold, NB, K, B_PAD, BK, HAS_BIAS, REPS)
            if keep:
                tl.store(XS + at, x, mask=ok)
        else:
            x = tl.load(XS + at, mask=ok, other=0.0)
    return x, x * tl.load(LN_W + offs_k, mask=k_ok, other=0.0).to(tl.float32)[None, :]


@triton.jit
def _folded(out, mean, rstd, U, offs_n, n_ok, N: tl.constexpr):
    """A FOLD phase's products (B_PAD, BN), x*g W^T, finished: rstd (. - mean u) + c with each row's
    mean and 1 / std; U holds u, then c (N each, fp32)."""
    u = tl.load(U + offs_n, mask=n_ok, other=0.0)
    c = tl.load(U + N + offs_n, mask=n_ok, other=0.0)
    return rstd[:, None] * (out - mean[:, None] * u[None, :]) + c[None, :]


@triton.jit
def _phase_input(X, NXT, FOLD_B, fold, XS, LN_W, LN_B, eps, NB: tl.constexpr, K: tl.constexpr, B_PAD: tl.constexpr,
                 BK: tl.constexpr, ONE: tl.constexpr, WHOLE: tl.constexpr, FOLD: tl.constexpr,
                 HAS_BIAS: tl.constexpr, HAS_LN_B: tl.constexpr, STAGES: tl.constexpr, REPS: tl.constexpr):
    """What a phase reads of its slot before its first tile: each row's mean and 1 / std, and with
    WHOLE (one chunk covers the slot, but a program may have several tiles: not ONE) the input
    every tile's products take, worked out once a phase rather than once a tile. Without FOLD,
    the _stats pass (the copy into XS) and, with WHOLE, the LayerNorm of the slot; with FOLD,
    only with WHOLE: the slot read once (folded with `fold`), its sums, x times g, the same for
    either form; else nothing, as the tiles gather the sums themselves (_tile_input)."""
    x = tl.zeros([B_PAD, BK], dtype=tl.float32)
    mean = tl.zeros([B_PAD], dtype=tl.float32)
    rstd = mean
    if FOLD:
        if WHOLE:
            raw, x = _raw_chunk(0, X, NXT, FOLD_B, fold, XS, LN_W, True, False, NB, K, B_PAD, BK, HAS_BIAS, SLOT,
                                REPS)
            mean, rstd = _moments(tl.sum(raw, 1), tl.sum(raw * raw, 1), K, eps)
    else:
        mean, rstd = _stats(X, NXT, FOLD_B, fold, XS, eps, NB, K, B_PAD, BK, ONE, HAS_BIAS, STAGES, REPS)
        if WHOLE:
            x = _normed_input(0, mean, rstd, X, X, X, 0, XS, LN_W, LN_B, eps, NB, K, B_PAD, BK, False, False,
                              HAS_LN_B, REPS)
    return mean, rstd, x


@triton.jit
def _tile_input(k0, x_whole, s1, s2, mean, rstd, X, NXT, FOLD_B, fold, first, more, XS, LN_W, LN_B, eps,
                NB: tl.constexpr, K: tl.constexpr, B_PAD: tl.constexpr, BK: tl.constexpr, ONE: tl.constexpr,
                WHOLE: tl.constexpr, FOLD: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_LN_B: tl.constexpr,
                REPS: tl.constexpr):
    """Chunk k0 of a tile's input to its products, and the sums s1, s2 so far: the phase's whole
    input (WHOLE); with FOLD the raw chunk times g (_raw_chunk: COPY keeps the `first` tile's in
    XS when `more` follow), its rows' sums added to s1, s2; else the chunk normalised (with ONE
    from the slot, folded with `fold`; else from XS)."""
    if WHOLE:
        x = x_whole
    elif FOLD:
        raw, x = _raw_chunk(k0, X, NXT, FOLD_B, fold, XS, LN_W, first, first & more, NB, K, B_PAD, BK, HAS_BIAS,
                            FOLD, REPS)
        s1 += tl.sum(raw, 1)
        s2 += tl.sum(raw * raw, 1)
    else:
        x = _normed_input(k0, mean, rstd, X, NXT, FOLD_B, fold, XS, LN_W, LN_B, eps, NB, K, B_PAD, BK, ONE, HAS_BIAS,
                          HAS_LN_B, REPS)
    return x, s1, s2
