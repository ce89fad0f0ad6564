"""The phases of one decode step in kernels/triton_persistent.py, one @triton.jit function each,
and the tiles, chunks and products they share (the MLP phase is in kernels/triton_decode_mlp.py,
the attention in kernels/triton_decode_attention.py); the residual stream they read and add to
is in kernels/triton_decode_stream.py.

Every phase spreads its tiles over the grid (`for tile in range(pid, tiles, nprog)`). A
program's first weight chunk loads while it waits at the barrier opening the phase (_weights):
when that is its one tile and one reduction chunk (ONE, chosen by the plan), only the
activations -- a few KB written by the phase before -- are waited for after it. Otherwise, with
AHEAD, each chunk's load is issued before the previous chunk's products, so that two chunks are
always in flight -- across tiles, and in the MLP from its first product's weights to its
second's: the software pipeliner (STAGES) does not take the multiply-add form's loads, and loads
issued one at a time stream at a fraction of the bandwidth. With PRE (by hand), a pipelined
loop's first chunk loads at the barrier too, and is multiplied before the loop.
Activations written by other programs are read with cache_modifier=".cg": from L2, never from a
stale L1 line."""
import triton
import triton.language as tl

from .triton_decode_stream import COPY, _folded, _moments, _phase_input, _tile_input

NEG = tl.constexpr(-1.0e30)  # a finite "minus infinity": exp(NEG - NEG) must not be NaN


@triton.jit
def _block(W, r0, r_end, c0, c_end, ld, BN: tl.constexpr, BK: tl.constexpr, PACKED: tl.constexpr):
    """The block W[r0:r_end, c0:c_end] (row stride ld) padded to (BN, BK) with zeros. PACKED: W is
    stored chunk by chunk (decode/restack.py's pack_chunks), so that this block, r0 a multiple of
    BN and c0 of BK, is one contiguous run of BN * BK weights, where a row-major block is BN runs
    of BK weights, each a row apart."""
    offs_n = tl.arange(0, BN)
    offs_k = c0 + tl.arange(0, BK)
    if PACKED:
        ptrs = W + r0 * ld + c0 * BN + offs_n[:, None] * BK + (offs_k - c0)[None, :]
    else:
        ptrs = W + (r0 + offs_n)[:, None] * ld + offs_k[None, :]
    return tl.load(ptrs, mask=(r0 + offs_n < r_end)[:, None] & (offs_k < c_end)[None, :], other=0.0)


@triton.jit
def _weights(W, r0, r_end, c0, c_end, ld, BN: tl.constexpr, BK: tl.constexpr, LOAD: tl.constexpr,
             PACKED: tl.constexpr):
    """The block W[r0:r_end, c0:c_end] padded to (BN, BK) when LOAD (the phase's first chunk,
    loaded at the barrier); else nothing worth loading (the phase loads its chunks itself)."""
    if LOAD:
        w = _block(W, r0, r_end, c0, c_end, ld, BN, BK, PACKED)
    else:
        w = tl.zeros([BN, BK], dtype=W.dtype.element_ty)
    return w


@triton.jit
def _prefetch_l2(W, r0, r_end, c0, c_end, ld, LINES: tl.constexpr):
    """Ask L2 for the block W[r0:r_end, c0:c_end] (row stride ld) and go on without waiting (PTX
    prefetch.global.L2, LINES lines of 128 bytes an instruction round): a later phase's weights
    travel from memory while this phase works, and that phase then finds them in L2. Unlike a
    chunk loaded at the barrier, nothing is held in registers."""
    PER_LINE: tl.constexpr = 1024 // W.dtype.element_ty.primitive_bitwidth  # elements in 128 bytes
    per_row = tl.cdiv(c_end - c0, PER_LINE)
    n = (r_end - r0) * per_row  # none for a program without a tile (r_end <= r0)
    for l0 in range(0, n, LINES):
        offs = _line_offsets(l0, n, per_row, r0, c0, ld, LINES, PER_LINE)
        tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [W + offs],
                                  dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _line_offsets(l0, n, per_row, r0, c0, ld, LINES: tl.constexpr, PER_LINE: tl.constexpr):
    """Element offsets of lines l0 .. l0 + LINES - 1 of a block's n lines, per_row a row (the last
    line again past the end, never past the block)."""
    line = tl.minimum(l0 + tl.arange(0, LINES), n - 1)
    return (r0 + line // per_row).to(tl.int64) * ld + c0 + line % per_row * PER_LINE


@triton.jit
def _tile_rows(tile, N: tl.constexpr, GROUP: tl.constexpr, SPAN: tl.constexpr):
    """Output rows of a tile, [first, end), when the N rows come in groups of GROUP (a head's q, k,
    v) that no tile straddles, SPAN rows a tile (a tile of BN >= SPAN, masked at its end); a tile
    past the last has none. SPAN below BN evens out the work: where the grid's tiles of BN do not
    divide over the programs (72 of 64 rows on 132), tiles of fewer rows spread them over more."""
    per_group: tl.constexpr = (GROUP + SPAN - 1) // SPAN
    g = tile // per_group
    r0 = g * GROUP + (tile % per_group) * SPAN
    return r0, tl.minimum(tl.minimum(r0 + SPAN, (g + 1) * GROUP), N)


@triton.jit
def _next_chunk(W, tile, k0, nprog, N: tl.constexpr, K: tl.constexpr, GROUP: tl.constexpr, SPAN: tl.constexpr,
                BN: tl.constexpr, BK: tl.constexpr, PACKED: tl.constexpr):
    """The weight chunk after (tile, k0) in a program's walk over its tiles (AHEAD): the tile's
    next chunk, or the first of its next tile (nothing past the last tile)."""
    last = k0 + BK >= K
    r0, r_end = _tile_rows(tl.where(last, tile + nprog, tile), N, GROUP, SPAN)
    c0 = tl.where(last, 0, k0 + BK)
    return _block(W, r0, r_end, c0, K, K, BN, BK, PACKED)


@triton.jit
def _first_chunk(w_pre, first, W, r0, r_end, ld, BN: tl.constexpr, BK: tl.constexpr, PACKED: tl.constexpr):
    """A tile's first weight chunk (PRE): the one loaded at the barrier for the program's first
    tile, else loaded now."""
    if first:
        w = w_pre
    else:
        w = _block(W, r0, r_end, 0, ld, ld, BN, BK, PACKED)
    return w


@triton.jit
def _product(acc, w, x, DOT: tl.constexpr, PREC: tl.constexpr):
    """acc += x . w^T for a (BN, BK) weight chunk and (B_PAD, BK) inputs. DOT: on the tensor cores
    (acc transposed, (BN, B_PAD)), the inputs in the weights' dtype (PREC: fp32's rounding);
    else fp32 multiply-adds reduced chunk by chunk into (B_PAD, BN), so that registers hold the
    weights (in their own dtype), not a product per weight."""
    if DOT:
        acc = tl.dot(w, tl.trans(x.to(w.dtype)), acc, input_precision=PREC)
    else:
        acc += tl.sum(x[:, None, :] * w.to(tl.float32)[None, :, :], 2)
    return acc


@triton.jit
def _zeros(BN: tl.constexpr, B_PAD: tl.constexpr, DOT: tl.constexpr):
    """_product's accumulator for BN outputs: (BN, B_PAD) on the tensor cores, else (B_PAD, BN)."""
    if DOT:
        acc = tl.zeros([BN, B_PAD], dtype=tl.float32)
    else:
        acc = tl.zeros([B_PAD, BN], dtype=tl.float32)
    return acc


@triton.jit
def _reduced(acc, DOT: tl.constexpr):
    """The (B_PAD, BN) products _product accumulated."""
    if DOT:
        out = tl.trans(acc)
    else:
        out = acc
    return out


@triton.jit
def _tile_output(acc, s1, s2, mean, rstd, U, BIAS, offs_n, n_ok, eps, N: tl.constexpr, K: tl.constexpr,
                 DOT: tl.constexpr, FOLD: tl.constexpr, WHOLE: tl.constexpr, HAS_BIAS: tl.constexpr):
    """A tile's (B_PAD, BN) outputs from its products acc: with FOLD, the LayerNorm applied after
    them -- its mean and 1 / std from the tile's own sums s1, s2 (every tile gathers them: a few
    adds a chunk, where keeping the first tile's would put a branch in the loop), or with WHOLE
    the phase's -- and c holding the bias; else + BIAS (HAS_BIAS)."""
    if FOLD == COPY and not WHOLE:
        tl.debug_barrier()  # the first tile's copy in XS is read by the program's other threads
    out = _reduced(acc, DOT)
    if FOLD:
        if not WHOLE:
            mean, rstd = _moments(s1, s2, K, eps)
        out = _folded(out, mean, rstd, U, offs_n, n_ok, N)
    elif HAS_BIAS:
        out += tl.load(BIAS + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    return out


@triton.jit
def _matvec(pid, nprog, w_pre, X, NXT, FOLD_B, XS, LN_W, LN_B, eps, W, BIAS, U, OUT, KC, VC, CNT, pos,
            NB: tl.constexpr, N: tl.constexpr, K: tl.constexpr, GROUP: tl.constexpr,
            H: tl.constexpr, W_CACHE: tl.constexpr, B_PAD: tl.constexpr, BN: tl.constexpr, SPAN: tl.constexpr,
            BK: tl.constexpr, ONE: tl.constexpr, AHEAD: tl.constexpr, FOLD: tl.constexpr, HAS_BIAS: tl.constexpr,
            HAS_LN_B: tl.constexpr, HAS_BIAS_OUT: tl.constexpr, QKV: tl.constexpr, DOT: tl.constexpr,
            PREC: tl.constexpr, STAGES: tl.constexpr, PRE: tl.constexpr, REPS: tl.constexpr,
            PACKED: tl.constexpr):
    """OUT[b, n] = LN(X[b]) . W[n, :] (+ BIAS[n]) for every row b < NB of the stream slot X (the sum
    of its REPS copies), over
    this program's tiles of BN outputs (w_pre: its first chunk, when ONE, AHEAD or PRE; U: FOLD's
    u and c, kernels/triton_decode_stream.py). PRE: each tile's first chunk is multiplied before
    the pipelined loop over the others -- the program's first tile's from w_pre, loaded at the
    barrier, where the loop would load it only after the barrier opens. QKV: W's rows are
    head-major (head h's q, k, v are rows h*3D .. (h+1)*3D, GROUP = 3D); k and v are also written
    at slot `pos` of the (B, H, W, D) caches, program 0 folds X (+ FOLD_B) into the next slot NXT,
    and each tile counts itself done on its head's counter (CNT[h], release) for the attention
    that waits on it."""
    rows = tl.arange(0, B_PAD)
    row_ok = rows < NB
    XS += pid * NB * K  # this program's copy of the stream
    tiles: tl.constexpr = (N // GROUP) * ((GROUP + SPAN - 1) // SPAN)
    WHOLE: tl.constexpr = BK >= K and not ONE
    tl.static_assert(not PRE or not (ONE or AHEAD))  # those load their chunks their own way
    tl.static_assert(SPAN <= BN)  # a tile's rows are masked within its BN, never past it
    mean, rstd, x_whole = _phase_input(X, NXT, FOLD_B, (pid == 0) * QKV, XS, LN_W, LN_B, eps, NB, K, B_PAD, BK, ONE,
                                       WHOLE, FOLD, HAS_BIAS, HAS_LN_B, STAGES, REPS)
    w_next = w_pre
    for tile in range(pid, tiles, nprog):
        r0, r_end = _tile_rows(tile, N, GROUP, SPAN)
        offs_n = r0 + tl.arange(0, BN)
        n_ok = offs_n < r_end
        acc = _zeros(BN, B_PAD, DOT)
        s1 = tl.zeros([B_PAD], dtype=tl.float32)  # FOLD: the tile's rows' sums, chunk by chunk
        s2 = s1
        fold = (tile == 0) * QKV  # program 0's first tile folds the slot into the next
        if PRE:
            w = _first_chunk(w_pre, tile == pid, W, r0, r_end, K, BN, BK, PACKED)
            x, s1, s2 = _tile_input(0, x_whole, s1, s2, mean, rstd, X, NXT, FOLD_B, fold, tile == pid,
                                    tile + nprog < tiles, XS, LN_W, LN_B, eps, NB, K, B_PAD, BK, ONE, WHOLE, FOLD,
                                    HAS_BIAS, HAS_LN_B, REPS)
            acc = _product(acc, w, x, DOT, PREC)
        for k0 in tl.range(PRE * BK, K, BK, num_stages=STAGES):  # STAGES chunks of W in flight
            x, s1, s2 = _tile_input(k0, x_whole, s1, s2, mean, rstd, X, NXT, FOLD_B, fold, tile == pid,
                                    tile + nprog < tiles, XS, LN_W, LN_B, eps, NB, K, B_PAD, BK, ONE, WHOLE, FOLD,
                                    HAS_BIAS, HAS_LN_B, REPS)
            if ONE:
                w = w_pre
            elif AHEAD:
                w = w_next
                w_next = _next_chunk(W, tile, k0, nprog, N, K, GROUP, SPAN, BN, BK, PACKED)
            else:
                w = _block(W, r0, r_end, k0, K, K, BN, BK, PACKED)
            acc = _product(acc, w, x, DOT, PREC)
        out = _tile_output(acc, s1, s2, mean, rstd, U, BIAS, offs_n, n_ok, eps, N, K, DOT, FOLD, WHOLE, HAS_BIAS_OUT)
        out_ok = row_ok[:, None] & n_ok[None, :]
        tl.store(OUT + rows[:, None] * N + offs_n[None, :], out, mask=out_ok)
        if QKV:
            D: tl.constexpr = GROUP // 3
            h = r0 // GROUP
            r = offs_n - h * GROUP  # 0..D q, D..2D k, 2D..3D v
            slot = ((rows[:, None] * H + h) * W_CACHE + pos) * D + (r % D)[None, :]
            tl.store(KC + slot, out.to(KC.dtype.element_ty), mask=out_ok & (r // D == 1)[None, :])
            tl.store(VC + slot, out.to(VC.dtype.element_ty), mask=out_ok & (r // D == 2)[None, :])
            tl.debug_barrier()  # every thread of this program has issued its stores
            tl.atomic_add(CNT + h, 1, sem="release", scope="gpu")


@triton.jit
def _wait(CNT, target):
    """Spin until the counter reaches `target` (acquire: what its adders stored is then visible)."""
    seen = tl.atomic_add(CNT, 0, sem="acquire", scope="gpu")
    while seen < target:
        seen = tl.atomic_add(CNT, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()


@triton.jit
def _sample_embed(pid, nprog, LOGITS, NOISE, OUT, t, WTE, WPE, STREAM, pos_next, temperature, top_k,
                  NB: tl.constexpr, V: tl.constexpr, C: tl.constexpr, L: tl.constexpr, TOTAL: tl.constexpr,
                  W_CACHE: tl.constexpr, VP: tl.constexpr, CP: tl.constexpr, CH: tl.constexpr,
                  GREEDY: tl.constexpr, TOP_K: tl.constexpr, REPS: tl.constexpr):
    """Row b's token for column t (decode/sampling.py's rule: greedy, or Gumbel-max over
    logits / temperature with everything below the k-th largest dropped), then the next step's
    input, stream slot 0 = wte[token] + wpe[pos_next]; the other slots (and every slot's REPS
    copies) start again from zero."""
    offs_v = tl.arange(0, VP)
    v_ok = offs_v < V
    offs_c = tl.arange(0, CP)
    c_ok = offs_c < C
    for b in range(pid, NB, nprog):
        row = LOGITS + b * V
        z = tl.load(row + offs_v, mask=v_ok, other=float("-inf"), cache_modifier=".cg")
        if not GREEDY:
            z = z / temperature
            if TOP_K:  # kept iff fewer than k logits are strictly larger: torch.topk's k-th value rule
                larger = tl.zeros([VP], dtype=tl.int32)
                for j0 in range(0, VP, CH):
                    offs_j = j0 + tl.arange(0, CH)
                    zj = tl.load(row + offs_j, mask=offs_j < V, other=float("-inf"), cache_modifier=".cg")
                    larger += tl.sum((zj[None, :] / temperature > z[:, None]).to(tl.int32), 1)
                z = tl.where(larger < top_k, z, float("-inf"))
            z += tl.load(NOISE + b * V + offs_v, mask=v_ok, other=0.0)
        z = tl.where(v_ok, z, float("-inf"))
        token = tl.argmax(z, 0)
        tl.store(OUT + b * TOTAL + t, token.to(tl.int64))
        ok = c_ok & (offs_c * 0 + pos_next < W_CACHE)  # the run's last step has no next position
        x = tl.load(WTE + token * C + offs_c, mask=ok, other=0.0).to(tl.float32) + \
            tl.load(WPE + pos_next * C + offs_c, mask=ok, other=0.0).to(tl.float32)
        tl.store(STREAM + b * C + offs_c, x, mask=ok)
    ZEROS: tl.constexpr = ((2 * L + 1) * REPS - 1) * NB * C  # everything after slot 0's first copy
    for z0 in range(pid * CP, ZEROS, nprog * CP):
        offs_z = z0 + offs_c
        tl.store(STREAM + NB * C + offs_z, tl.zeros([CP], dtype=tl.float32), mask=offs_z < ZEROS)
