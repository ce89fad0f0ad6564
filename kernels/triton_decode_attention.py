"""The attn phase's second half in kernels/triton_persistent.py: every (row, head)'s attention
over the static cache, as soon as its head's q, k and v tiles are counted done, and the output
projection added into the stream (kernels/triton_decode_phases.py has the qkv tiles before it).
Rows written by other programs in this step (q, k, v, y) are read with cache_modifier=".cg":
from L2, never from a stale L1 line."""
import triton
import triton.language as tl

from .triton_decode_phases import NEG, _product, _reduced, _wait, _zeros


@triton.jit
def _partial(QKV, KC, VC, bh, a, e, scale, H: tl.constexpr, D: tl.constexpr, W_CACHE: tl.constexpr,
             BT: tl.constexpr, BD: tl.constexpr):
    """(row, head) bh = b * H + h: row b's new query of head h against cache slots a..e-1 (e > a),
    an online softmax over blocks of BT slots. Returns its running max m, its sum l and its
    unnormalised output acc (BD,), fp32: the slots' share, to combine with other shares (or
    acc / l: the attention over them)."""
    offs_d = tl.arange(0, BD)
    d_ok = offs_d < D
    q = tl.load(QKV + (bh // H) * 3 * H * D + (bh % H) * 3 * D + offs_d, mask=d_ok, other=0.0, cache_modifier=".cg")
    base = bh * W_CACHE * D
    m = tl.max(tl.full([BD], NEG, tl.float32), 0)
    l = m * 0.0
    acc = tl.zeros([BD], dtype=tl.float32)
    for t0 in range(a, e, BT):
        offs_t = t0 + tl.arange(0, BT)
        t_ok = offs_t < e
        kv_ok = t_ok[:, None] & d_ok[None, :]
        # held in the cache's dtype, widened as they are used: a 16-bit cache's block costs half the registers
        k = tl.load(KC + base + offs_t[:, None] * D + offs_d[None, :], mask=kv_ok, other=0.0, cache_modifier=".cg")
        v = tl.load(VC + base + offs_t[:, None] * D + offs_d[None, :], mask=kv_ok, other=0.0, cache_modifier=".cg")
        sc = tl.where(t_ok, tl.sum(k.to(tl.float32) * q[None, :], 1) * scale, NEG)
        m_new = tl.maximum(m, tl.max(sc, 0))
        p = tl.where(t_ok, tl.exp(sc - m_new), 0.0)
        alpha = tl.exp(m - m_new)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)
        l = l * alpha + tl.sum(p, 0)
        m = m_new
    return m, l, acc


@triton.jit
def _partial_ahead(QKV, KC, VC, k_old, bh, a, e, pos, scale, H: tl.constexpr, D: tl.constexpr,
                   W_CACHE: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr):
    """_partial when the whole window is one block and the keys of slots a..min(e, pos)-1 were
    loaded ahead, each at its slot (k_old: _keys_ahead with SPLIT); this step's key, at slot pos,
    is read from the cache here, after the head's tiles are counted done."""
    offs_t = tl.arange(0, BT)
    offs_d = tl.arange(0, BD)
    d_ok = offs_d < D
    q = tl.load(QKV + (bh // H) * 3 * H * D + (bh % H) * 3 * D + offs_d, mask=d_ok, other=0.0, cache_modifier=".cg")
    base = bh * W_CACHE * D
    k_new = tl.load(KC + base + pos * D + offs_d, mask=d_ok, other=0.0, cache_modifier=".cg")
    t_ok = (offs_t >= a) & (offs_t < e)
    v = tl.load(VC + base + offs_t[:, None] * D + offs_d[None, :], mask=t_ok[:, None] & d_ok[None, :], other=0.0,
                cache_modifier=".cg")
    k = tl.where((offs_t == pos)[:, None], k_new[None, :], k_old)
    sc = tl.where(t_ok, tl.sum(k.to(tl.float32) * q[None, :], 1) * scale, NEG)
    m = tl.max(sc, 0)
    p = tl.where(t_ok, tl.exp(sc - m), 0.0)
    return m, tl.sum(p, 0), tl.sum(p[:, None] * v.to(tl.float32), 0)


@triton.jit
def _head_attention(QKV, KC, VC, b, h, pos, scale, H: tl.constexpr, D: tl.constexpr, W_CACHE: tl.constexpr,
                    BT: tl.constexpr, BD: tl.constexpr):
    """Row b's new query of head h against cache slots 0..pos. Returns y (BD,), fp32."""
    m, l, acc = _partial(QKV, KC, VC, b * H + h, 0, pos + 1, scale, H, D, W_CACHE, BT, BD)
    return acc / l


@triton.jit
def _cache_block(CACHE, bh, pos, NB: tl.constexpr, H: tl.constexpr, D: tl.constexpr, W_CACHE: tl.constexpr,
                 BT: tl.constexpr, BD: tl.constexpr):
    """Cache slots 0..pos-1 of (row, head) bh = b * H + h, as stored: a (BT, BD) block, zero
    elsewhere (and for bh past the batch)."""
    offs_t = tl.arange(0, BT)
    offs_d = tl.arange(0, BD)
    ok = (offs_t < pos)[:, None] & (offs_d < D)[None, :] & (offs_t * 0 + bh < NB * H)[:, None]
    return tl.load(CACHE + (bh * W_CACHE + offs_t[:, None]) * D + offs_d[None, :], mask=ok, other=0.0,
                   cache_modifier=".cg")


@triton.jit
def _run_start(run, pos, NB: tl.constexpr, H: tl.constexpr, SPLIT: tl.constexpr):
    """Where run `run` of SPLIT (_split_shares) starts: its first (row, head) item and that
    item's slots a..e-1 it covers (a >= e: the run is empty)."""
    n = pos + 1
    per_run = (NB * H * n + SPLIT - 1) // SPLIT
    s0 = run * per_run
    bh = s0 // n
    return bh, s0 - bh * n, tl.minimum(tl.minimum(s0 + per_run, NB * H * n), bh * n + n) - bh * n


@triton.jit
def _keys_ahead(KC, bh, pos, NB: tl.constexpr, H: tl.constexpr, D: tl.constexpr, W_CACHE: tl.constexpr,
                BT: tl.constexpr, BD: tl.constexpr, AHEAD: tl.constexpr, SPLIT: tl.constexpr):
    """With AHEAD (the whole window is one block of BT slots), (row, head) bh's keys before this
    step's slot: earlier steps wrote them, so they load while the program waits at the barrier
    that opens the attn phase, like the weights (_weights); else nothing worth loading. Only the
    keys: the values, needed after the scores, load in the scores' shadow, and holding both
    spilled more (sm_90 compile, 384-1152 wide: 436-684 bytes at batch 1-8, against 12-20 at
    batch 1 and 148-564 at batch 4 and 8 for the keys alone). With SPLIT, bh is the program's
    first run, and the keys those of its first item's slots before this step's, at their slots."""
    if AHEAD:
        if SPLIT:
            item, a, e = _run_start(bh, pos, NB, H, SPLIT)
            offs_t = tl.arange(0, BT)
            offs_d = tl.arange(0, BD)
            ok = ((offs_t >= a) & (offs_t < tl.minimum(e, pos)))[:, None] & (offs_d < D)[None, :]
            k = tl.load(KC + (item * W_CACHE + offs_t[:, None]) * D + offs_d[None, :], mask=ok, other=0.0,
                        cache_modifier=".cg")
        else:
            k = _cache_block(KC, bh, pos, NB, H, D, W_CACHE, BT, BD)
    else:
        k = tl.zeros([BT, BD], dtype=KC.dtype.element_ty)
    return k


@triton.jit
def _head_attention_ahead(QKV, VC, k_old, b, h, pos, scale, NB: tl.constexpr, H: tl.constexpr, D: tl.constexpr,
                          W_CACHE: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr):
    """_head_attention when the whole window is one block and its keys before slot pos were
    loaded ahead (k_old): q and this step's k and v are read from the qkv buffer, rounded to the
    cache's dtype as the cache holds them, and the values before pos from the cache. Returns y
    (BD,), fp32."""
    offs_t = tl.arange(0, BT)
    offs_d = tl.arange(0, BD)
    d_ok = offs_d < D
    row = QKV + b * 3 * H * D + h * 3 * D
    q = tl.load(row + offs_d, mask=d_ok, other=0.0, cache_modifier=".cg")
    k_new = tl.load(row + D + offs_d, mask=d_ok, other=0.0, cache_modifier=".cg").to(k_old.dtype)
    v_new = tl.load(row + 2 * D + offs_d, mask=d_ok, other=0.0, cache_modifier=".cg").to(VC.dtype.element_ty)
    v_old = _cache_block(VC, b * H + h, pos, NB, H, D, W_CACHE, BT, BD)
    new = (offs_t == pos)[:, None]
    t_ok = offs_t <= pos
    sc = tl.where(t_ok, tl.sum(tl.where(new, k_new[None, :], k_old).to(tl.float32) * q[None, :], 1) * scale, NEG)
    p = tl.where(t_ok, tl.exp(sc - tl.max(sc, 0)), 0.0)
    return tl.sum(p[:, None] * tl.where(new, v_new[None, :], v_old).to(tl.float32), 0) / tl.sum(p, 0)


@triton.jit
def _attention(QKV, KC, VC, CNT, target, k_old, bh, first, pos, scale, NB: tl.constexpr, H: tl.constexpr,
               D: tl.constexpr, W_CACHE: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr, AHEAD: tl.constexpr):
    """(row, head) bh's attention, once its head's q, k and v are counted done (CNT[h] reaches
    `target`). AHEAD: the whole window is one block, and the keys of the program's first item
    (bh == first) were loaded at the barrier that opened the phase (k_old); a later item's load here, before
    the wait, which then hides that trip too. Returns y (BD,), fp32."""
    if AHEAD:
        if bh != first:
            k_old = _cache_block(KC, bh, pos, NB, H, D, W_CACHE, BT, BD)
    _wait(CNT + bh % H, target)
    if AHEAD:
        y = _head_attention_ahead(QKV, VC, k_old, bh // H, bh % H, pos, scale, NB, H, D, W_CACHE, BT, BD)
    else:
        y = _head_attention(QKV, KC, VC, bh // H, bh % H, pos, scale, H, D, W_CACHE, BT, BD)
    return y


@triton.jit
def _split_shares(pid, nprog, QKV, KC, VC, k_old, CNT, target, YS, YCNT, pos, scale, NB: tl.constexpr,
                  H: tl.constexpr, D: tl.constexpr, W_CACHE: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr,
                  SPLIT: tl.constexpr, AHEAD: tl.constexpr):
    """The attention's cache slots -- every (row, head)'s pos + 1 of them, end to end -- cut into SPLIT
    equal runs, one a program (SPLIT of them: a program takes runs pid, pid + nprog, ...), whatever
    the count of (row, head) items: so that no program attends over twice the slots of another when
    the items outnumber the programs, and several share an item when they are fewer. A run covers
    the ends of one or more items; for each, once its head's q, k and v are counted done, it writes
    its share (m, l, acc: _partial) into YS at the item's part `run - the item's first run`, and
    adds the slots it covered to the head's YCNT: the head's rows are all in when that has grown by
    NB * (pos + 1) this step. YS: (NB * H, PARTS) shares of BD + 2 floats (acc, then m and l).
    AHEAD: the keys of the program's first run's first item were loaded at the barrier (k_old)."""
    PARTS: tl.constexpr = (SPLIT + NB * H - 1) // (NB * H) + 1  # the most runs one item's slots meet
    n = pos + 1
    total = NB * H * n
    per_run = (total + SPLIT - 1) // SPLIT
    offs_d = tl.arange(0, BD)
    two = tl.arange(0, 2)
    for run in range(pid, SPLIT, nprog):
        s0 = run * per_run
        s1 = tl.minimum(s0 + per_run, total)
        for bh in range(s0 // n, (s1 + n - 1) // n):
            a = tl.maximum(s0, bh * n) - bh * n
            e = tl.minimum(s1, bh * n + n) - bh * n
            _wait(CNT + bh % H, target)
            first = (run == pid) & (bh == s0 // n)  # the item whose keys k_old holds
            if AHEAD:
                if first:
                    m, l, acc = _partial_ahead(QKV, KC, VC, k_old, bh, a, e, pos, scale, H, D, W_CACHE, BT, BD)
                else:
                    m, l, acc = _partial(QKV, KC, VC, bh, a, e, scale, H, D, W_CACHE, BT, BD)
            else:
                m, l, acc = _partial(QKV, KC, VC, bh, a, e, scale, H, D, W_CACHE, BT, BD)
            share = YS + (bh * PARTS + run - (bh * n) // per_run) * (BD + 2)
            tl.store(share + offs_d, acc)
            tl.store(share + BD + two, tl.where(two == 0, m, l))
            tl.debug_barrier()  # every thread of this program has issued its stores
            tl.atomic_add(YCNT + bh % H, e - a, sem="release", scope="gpu")


@triton.jit
def _combined(YS, h, pos, NB: tl.constexpr, H: tl.constexpr, BD: tl.constexpr, B_PAD: tl.constexpr,
              SPLIT: tl.constexpr):
    """Head h's attention output for every row (B_PAD, BD), fp32, from the shares _split_shares
    wrote (the head's rows all counted in): each row's shares rescaled to their common max and
    summed, over the sum of their softmax weights. Rows past the batch come out zero."""
    PARTS: tl.constexpr = (SPLIT + NB * H - 1) // (NB * H) + 1
    n = pos + 1
    per_run = (NB * H * n + SPLIT - 1) // SPLIT
    rows = tl.arange(0, B_PAD)
    offs_d = tl.arange(0, BD)
    bh = rows * H + h
    runs = ((bh + 1) * n - 1) // per_run - (bh * n) // per_run + 1  # the runs the row's slots meet
    m = tl.full([B_PAD], NEG, tl.float32)
    l = tl.zeros([B_PAD], dtype=tl.float32)
    acc = tl.zeros([B_PAD, BD], dtype=tl.float32)
    for j in tl.static_range(PARTS):
        ok = (rows < NB) & (j < runs)
        share = YS + (bh * PARTS + j) * (BD + 2)
        m_j = tl.load(share + BD, mask=ok, other=NEG, cache_modifier=".cg")
        l_j = tl.load(share + BD + 1, mask=ok, other=0.0, cache_modifier=".cg")
        acc_j = tl.load(share[:, None] + offs_d[None, :], mask=ok[:, None], other=0.0, cache_modifier=".cg")
        m_new = tl.maximum(m, m_j)
        alpha = tl.exp(m - m_new)
        beta = tl.exp(m_j - m_new)
        acc = acc * alpha[:, None] + acc_j * beta[:, None]
        l = l * alpha + l_j * beta
        m = m_new
    return acc / tl.where(rows < NB, l, 1.0)[:, None]


@triton.jit
def _attend(pid, nprog, wo_pre, QKV, KC, VC, k_old, first, CNT, target, W_O, XA, Y, YCNT, y_target, pos, scale,
            NB: tl.constexpr, H: tl.constexpr, D: tl.constexpr, W_CACHE: tl.constexpr, BT: tl.constexpr,
            BD: tl.constexpr, CHUNKS: tl.constexpr, BN_O: tl.constexpr, ONE_O: tl.constexpr, SHARED_O: tl.constexpr,
            B_PAD: tl.constexpr, DOT: tl.constexpr, PREC: tl.constexpr, AHEAD: tl.constexpr, PACK_O: tl.constexpr,
            SPLIT: tl.constexpr):
    """Every (row, head)'s attention, as soon as that head's q, k and v are all written (its counter
    CNT[h] reaches `target`), then the output projection y W_proj^T added into XA, in one of two ways:
    - per row (not SHARED_O): items (row, head, one of CHUNKS chunks of the outputs, in blocks of
      BN_O) each add y_(b,h) W_proj[chunk, h]^T; each chunk's program redoes the (small) attention
      rather than wait for another's, so that idle programs share the projection's loads;
    - shared (SHARED_O): (row, head) items write y into Y and count themselves on the head's
      YCNT; then (head, chunk) items wait for all NB rows of their head (`y_target`) and add
      Y[:, h] W_proj[chunk, h]^T for every row at once: each block of W_proj is read once, not once
      a row, at the price of one more hand-over.
    The program's first item is (row, head) `first`, whose keys k_old may be loaded already
    (_attention). PACK_O: W_O is stored head-major, head h's (C, D) block one run. SPLIT (shared
    only): the attention in SPLIT equal runs of cache slots, not an item a program
    (_split_shares); Y holds their shares, and each (head, chunk) item combines its head's
    (_combined)."""
    C: tl.constexpr = H * D
    CW: tl.constexpr = (C + CHUNKS - 1) // CHUNKS
    offs_d = tl.arange(0, BD)
    d_ok = offs_d < D
    rows = tl.arange(0, B_PAD)
    if SPLIT:
        _split_shares(pid, nprog, QKV, KC, VC, k_old, CNT, target, Y, YCNT, pos, scale, NB, H, D, W_CACHE, BT, BD,
                      SPLIT, AHEAD)
    elif SHARED_O:
        for bh in range(pid, NB * H, nprog):
            y = _attention(QKV, KC, VC, CNT, target, k_old, bh, first, pos, scale, NB, H, D, W_CACHE, BT, BD,
                           AHEAD)
            tl.store(Y + (bh // H) * C + (bh % H) * D + offs_d, y, mask=d_ok)
            tl.debug_barrier()  # every thread of this program has issued its stores
            tl.atomic_add(YCNT + bh % H, 1, sem="release", scope="gpu")
    for item in range(pid, (1 if SHARED_O else NB) * H * CHUNKS, nprog):
        c = item % CHUNKS
        bh = item // CHUNKS  # SHARED_O: the head alone
        h = bh % H
        if SHARED_O:
            _wait(YCNT + h, y_target)
            if SPLIT:
                y = _combined(Y, h, pos, NB, H, BD, B_PAD, SPLIT)
            else:
                y = tl.load(Y + rows[:, None] * C + h * D + offs_d[None, :],
                            mask=(rows < NB)[:, None] & d_ok[None, :], other=0.0, cache_modifier=".cg")
        else:
            y = _attention(QKV, KC, VC, CNT, target, k_old, bh, first, pos, scale, NB, H, D, W_CACHE, BT, BD,
                           AHEAD)[None, :]
        c_end = tl.minimum((c + 1) * CW, C)
        for n0 in range(c * CW, c_end, BN_O):
            offs_n = n0 + tl.arange(0, BN_O)
            n_ok = offs_n < c_end
            if ONE_O:
                w = wo_pre
            else:
                if PACK_O:
                    w_ptrs = W_O + h * D * C + offs_n[:, None] * D + offs_d[None, :]
                else:
                    w_ptrs = W_O + offs_n[:, None] * C + h * D + offs_d[None, :]
                w = tl.load(w_ptrs, mask=n_ok[:, None] & d_ok[None, :], other=0.0)
            if SHARED_O:
                part = _reduced(_product(_zeros(BN_O, B_PAD, DOT), w, y, DOT, PREC), DOT)
                tl.atomic_add(XA + rows[:, None] * C + offs_n[None, :], part,
                              mask=(rows < NB)[:, None] & n_ok[None, :], sem="relaxed", scope="gpu")
            else:
                part = tl.sum(w.to(tl.float32) * y, 1)
                tl.atomic_add(XA + (bh // H) * C + offs_n, part, mask=n_ok, sem="relaxed", scope="gpu")
