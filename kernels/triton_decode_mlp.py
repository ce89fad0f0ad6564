"""The MLP phase of kernels/triton_persistent.py: each program's hidden units, h = GELU(LN2(x)
W_fc^T (+b)), and their share h W_proj2[:, units]^T added into the next stream slot; the tiles,
chunks and products are kernels/triton_decode_phases.py's, the stream's reads
kernels/triton_decode_stream.py's."""
import triton
import triton.language as tl

from .triton_decode_phases import _block, _first_chunk, _product, _tile_output, _tile_rows, _zeros
from .triton_decode_stream import _phase_input, _tile_input


@triton.jit
def _share(XM, h, w2, c0, total, NB: tl.constexpr, C: tl.constexpr, B_PAD: tl.constexpr, BC: tl.constexpr,
           ADD_ONCE: tl.constexpr, DOT: tl.constexpr, PREC: tl.constexpr):
    """Columns c0..c0+BC of a tile's share h W_P2T[units, :] (w2: that block of W_P2T), added into
    the slot XM with fp32 atomics, or with ADD_ONCE into `total` (returned), this program's sum."""
    rows = tl.arange(0, B_PAD)
    offs_c = c0 + tl.arange(0, BC)
    if DOT:
        part = tl.dot(h.to(w2.dtype), w2, input_precision=PREC)
    else:
        part = tl.sum(h[:, :, None] * w2.to(tl.float32)[None, :, :], 1)
    if ADD_ONCE:
        total += part
    else:
        tl.atomic_add(XM + rows[:, None] * C + offs_c[None, :], part, mask=(rows < NB)[:, None] & (offs_c < C)[None, :],
                      sem="relaxed", scope="gpu")
    return total


@triton.jit
def _mlp(pid, nprog, wfc_pre, wp2_pre, X, XM, FOLD_B, XS, W_FC, B_FC, U, W_P2T, LN_W, LN_B, eps,
         NB: tl.constexpr, C: tl.constexpr, B_PAD: tl.constexpr, BN: tl.constexpr,
         BK: tl.constexpr, BC: tl.constexpr, ONE: tl.constexpr, AHEAD: tl.constexpr, FOLD: tl.constexpr,
         ADD_ONCE: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_LN_B: tl.constexpr, DOT: tl.constexpr,
         PREC: tl.constexpr, STAGES: tl.constexpr, SPAN: tl.constexpr, PRE_FC: tl.constexpr,
         PRE_P2: tl.constexpr, REPS: tl.constexpr, PACKED: tl.constexpr):
    """The whole MLP in one phase: each program takes tiles of SPAN hidden units (_tile_rows),
    h = GELU(LN2(X) W_fc^T (+b)) for them (X: the stream slot x +
    attention), and adds their share h W_proj2[:, units]^T into the next slot XM with fp32
    atomics (the sum's order varies from run to run, so fp32 results can differ in the last
    bits); program 0 also folds X (+ FOLD_B, b_proj2) into XM. W_P2T is W_proj2 transposed
    (4C, C): a program's units are contiguous rows, and its chunks of W_fc and of W_P2T are
    blocks of one shape (BC == BK), which AHEAD loads one ahead as a single walk. ADD_ONCE (the
    multiply-add form, one output chunk: BC >= C): a program of several tiles sums their shares
    in registers and adds them once, where every tile's own add would pile as many atomics onto
    the same C addresses as there are tiles in the grid. PRE_FC, PRE_P2: each tile's first chunk
    of W_fc, of W_P2T, multiplied before the pipelined loop over the others (the program's first
    tile's loaded at the barrier: wfc_pre, wp2_pre; _matvec's PRE). The shares go into copy
    pid % REPS of XM (kernels/triton_decode_stream.py), the fold into its first."""
    rows = tl.arange(0, B_PAD)
    row_ok = rows < NB
    XS += pid * NB * C
    XA = XM + (pid % REPS) * NB * C  # the copy of XM this program's shares go into
    tl.static_assert(ONE or not AHEAD or BC == BK)
    tl.static_assert(not (PRE_FC or PRE_P2) or not (ONE or AHEAD))  # those load their chunks their own way
    tl.static_assert(SPAN <= BN)  # a tile's rows are masked within its BN, never past it
    WHOLE: tl.constexpr = BK >= C and not ONE
    mean, rstd, x_whole = _phase_input(X, XM, FOLD_B, pid == 0, XS, LN_W, LN_B, eps, NB, C, B_PAD, BK, ONE, WHOLE,
                                       FOLD, HAS_BIAS, HAS_LN_B, STAGES, 1)
    w_next = wfc_pre
    tiles: tl.constexpr = (4 * C + SPAN - 1) // SPAN
    tl.static_assert(not ADD_ONCE or (BC >= C and not DOT))
    total = tl.zeros([B_PAD, BC], dtype=tl.float32)  # ADD_ONCE: the sum of this program's shares
    for tile in range(pid, tiles, nprog):
        r0, r_end = _tile_rows(tile, 4 * C, 4 * C, SPAN)
        offs_n = r0 + tl.arange(0, BN)
        n_ok = offs_n < r_end
        acc = _zeros(BN, B_PAD, DOT)
        s1 = tl.zeros([B_PAD], dtype=tl.float32)  # FOLD: the tile's rows' sums, chunk by chunk
        s2 = s1
        if PRE_FC:
            w = _first_chunk(wfc_pre, tile == pid, W_FC, r0, r_end, C, BN, BK, PACKED)
            x, s1, s2 = _tile_input(0, x_whole, s1, s2, mean, rstd, X, XM, FOLD_B, (tile == 0) * (pid == 0),
                                    tile == pid, tile + nprog < tiles, XS, LN_W, LN_B, eps, NB, C, B_PAD, BK, ONE,
                                    WHOLE, FOLD, HAS_BIAS, HAS_LN_B, 1)
            acc = _product(acc, w, x, DOT, PREC)
        for k0 in tl.range(PRE_FC * BK, C, BK, num_stages=STAGES):
            x, s1, s2 = _tile_input(k0, x_whole, s1, s2, mean, rstd, X, XM, FOLD_B, (tile == 0) * (pid == 0),
                                    tile == pid, tile + nprog < tiles, XS, LN_W, LN_B, eps, NB, C, B_PAD, BK, ONE,
                                    WHOLE, FOLD, HAS_BIAS, HAS_LN_B, 1)
            if ONE:
                w = wfc_pre
            elif AHEAD:  # next: this tile's next chunk of W_fc, or its first of W_P2T
                w = w_next
                if k0 + BK < C:
                    w_next = _block(W_FC, r0, r_end, k0 + BK, C, C, BN, BK, PACKED)
                else:
                    w_next = _block(W_P2T, r0, r_end, 0, C, C, BN, BK, PACKED)
            else:
                w = _block(W_FC, r0, r_end, k0, C, C, BN, BK, PACKED)
            acc = _product(acc, w, x, DOT, PREC)
        h = _tile_output(acc, s1, s2, mean, rstd, U, B_FC, offs_n, n_ok, eps, 4 * C, C, DOT, FOLD, WHOLE, HAS_BIAS)
        h = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))  # exact (erf) GELU, as F.gelu
        if PRE_P2:
            w2 = _first_chunk(wp2_pre, tile == pid, W_P2T, r0, r_end, C, BN, BC, PACKED)
            total = _share(XA, h, w2, 0, total, NB, C, B_PAD, BC, ADD_ONCE, DOT, PREC)
        for c0 in tl.range(PRE_P2 * BC, C, BC, num_stages=STAGES):
            if ONE:
                w2 = wp2_pre
            elif AHEAD:  # next: this tile's next chunk of W_P2T, or the first of W_fc of its next tile
                w2 = w_next
                if c0 + BC < C:
                    w_next = _block(W_P2T, r0, r_end, c0 + BC, C, C, BN, BC, PACKED)
                else:
                    r1, r1_end = _tile_rows(tile + nprog, 4 * C, 4 * C, SPAN)
                    w_next = _block(W_FC, r1, r1_end, 0, C, C, BN, BK, PACKED)
            else:
                w2 = _block(W_P2T, r0, r_end, c0, C, C, BN, BC, PACKED)
            total = _share(XA, h, w2, c0, total, NB, C, B_PAD, BC, ADD_ONCE, DOT, PREC)
    if ADD_ONCE and pid < tiles:  # the program's tiles' shares, summed in registers: one atomic add a column
        offs_c = tl.arange(0, BC)
        tl.atomic_add(XA + rows[:, None] * C + offs_c[None, :], total, mask=row_ok[:, None] & (offs_c < C)[None, :],
                      sem="relaxed", scope="gpu")
