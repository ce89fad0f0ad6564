"""The phases of one decode step in kernels/triton_persistent.py, one @triton.jit function each.
Every phase spreads its tiles over the grid (`for tile in range(pid, tiles, nprog)`); when a phase
gives each program at most one weight tile and one reduction chunk (ONE, chosen by the plan),
that tile was loaded before the barrier opening the phase (_weights), so only the activations --
a few KB written by the phase before -- are waited for after it. Activations written by other
programs are read with cache_modifier=".cg": from L2, never from a stale L1 line."""
import triton
import triton.language as tl

NEG = tl.constexpr(-1.0e30)  # a finite "minus infinity": an empty split's max (exp(NEG - NEG) must not be NaN)


@triton.jit
def _weights(W, tile, N: tl.constexpr, K: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, ONE: tl.constexpr):
    """Rows tile*BN.. of W (N, K), the whole reduction, when ONE; else nothing worth loading."""
    offs_n = tile * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    if ONE:
        w = tl.load(W + offs_n[:, None] * K + offs_k[None, :], mask=(offs_n < N)[:, None] & (offs_k < K)[None, :],
                    other=0.0)
    else:
        w = tl.zeros([BN, BK], dtype=W.dtype.element_ty)
    return w


@triton.jit
def _rows(IN, k0, NB: tl.constexpr, K: tl.constexpr, B_PAD: tl.constexpr, BK: tl.constexpr):
    """Columns k0..k0+BK of the (NB, K) activations IN, zero outside."""
    rows = tl.arange(0, B_PAD)
    offs_k = k0 + tl.arange(0, BK)
    ok = (rows < NB)[:, None] & (offs_k < K)[None, :]
    return tl.load(IN + rows[:, None] * K + offs_k[None, :], mask=ok, other=0.0, cache_modifier=".cg")


@triton.jit
def _stats(IN, NB: tl.constexpr, K: tl.constexpr, B_PAD: tl.constexpr, BK: tl.constexpr, eps):
    """Each row's LayerNorm mean and 1 / std (one pass of sums, fp32)."""
    s1 = tl.zeros([B_PAD, BK], dtype=tl.float32)
    s2 = tl.zeros([B_PAD, BK], dtype=tl.float32)
    for k0 in range(0, K, BK):
        x = _rows(IN, k0, NB, K, B_PAD, BK)
        s1 += x
        s2 += x * x
    mean = tl.sum(s1, 1) / K
    return mean, 1.0 / tl.sqrt(tl.sum(s2, 1) / K - mean * mean + eps)


@triton.jit
def _normed(x, k0, mean, rstd, LN_W, LN_B, NB: tl.constexpr, K: tl.constexpr, B_PAD: tl.constexpr,
            BK: tl.constexpr, HAS_LN_B: tl.constexpr):
    rows = tl.arange(0, B_PAD)
    offs_k = k0 + tl.arange(0, BK)
    k_ok = offs_k < K
    x = (x - mean[:, None]) * rstd[:, None] * tl.load(LN_W + offs_k, mask=k_ok, other=0.0).to(tl.float32)[None, :]
    if HAS_LN_B:
        x += tl.load(LN_B + offs_k, mask=k_ok, other=0.0).to(tl.float32)[None, :]
    return tl.where((rows < NB)[:, None] & k_ok[None, :], x, 0.0)


@triton.jit
def _input(IN, k0, LN_W, LN_B, eps, mean, rstd, PM, PL, NB: tl.constexpr, K: tl.constexpr, H: tl.constexpr,
           S: tl.constexpr, B_PAD: tl.constexpr, BK: tl.constexpr, S_PAD: tl.constexpr, MODE: tl.constexpr,
           ONE: tl.constexpr, HAS_LN_B: tl.constexpr):
    """A matvec's input chunk by MODE: 0 IN as is; 1 LayerNorm(IN) (with ONE the chunk is the
    whole row, so its statistics come from it: one load); 2 the attention output, combined from
    the S split partials: y = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s, per head."""
    if MODE == 2:
        rows = tl.arange(0, B_PAD)
        offs_k = k0 + tl.arange(0, BK)
        splits = tl.arange(0, S_PAD)
        ok = (rows < NB)[:, None] & (offs_k < K)[None, :]
        ok3 = (splits < S)[:, None, None] & ok[None, :, :]
        stat = (splits[:, None, None] * NB + rows[None, :, None]) * H + (offs_k // (K // H))[None, None, :]
        m = tl.load(PM + stat, mask=ok3, other=NEG, cache_modifier=".cg")
        f = tl.exp(m - tl.max(m, 0)[None, :, :])
        den = tl.sum(f * tl.load(PL + stat, mask=ok3, other=0.0, cache_modifier=".cg"), 0)
        a = tl.load(IN + (splits[:, None, None] * NB + rows[None, :, None]) * K + offs_k[None, None, :], mask=ok3,
                    other=0.0, cache_modifier=".cg")
        x = tl.where(ok, tl.sum(f * a, 0) / tl.where(ok, den, 1.0), 0.0)
    else:
        x = _rows(IN, k0, NB, K, B_PAD, BK)
        if MODE == 1:
            if ONE:
                mean = tl.sum(x, 1) / K
                rstd = 1.0 / tl.sqrt(tl.sum(x * x, 1) / K - mean * mean + eps)
            x = _normed(x, k0, mean, rstd, LN_W, LN_B, NB, K, B_PAD, BK, HAS_LN_B)
    return x


@triton.jit
def _matvec(pid, nprog, w_pre, IN, W, BIAS, RES, OUT, OUT2, BIAS2, LN_W, LN_B, eps, PM, PL, KC, VC, pos,
            NB: tl.constexpr, N: tl.constexpr, K: tl.constexpr, H: tl.constexpr, W_CACHE: tl.constexpr,
            S: tl.constexpr, B_PAD: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, S_PAD: tl.constexpr,
            MODE: tl.constexpr, ONE: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_LN_B: tl.constexpr,
            RESID: tl.constexpr, HAS_OUT2: tl.constexpr, HAS_BIAS2: tl.constexpr, CACHE: tl.constexpr,
            DOT: tl.constexpr, PREC: tl.constexpr):
    """OUT[b, n] = (RES[b, n] +) in(b) . W[n, :] (+ BIAS[n]) for every row b < NB, over this
    program's tiles of BN outputs (w_pre: the one tile, when ONE). HAS_OUT2: also OUT2 = OUT
    (+ BIAS2), the start the MLP phase accumulates into. CACHE: the qkv matvec also writes k and
    v at slot `pos` of the (B, H, W, D) caches. DOT: the products on the tensor cores (a batch
    padded to 16 rows), the activations in the weights' dtype (PREC: the dot's fp32 rounding);
    else fp32 multiply-adds, which cost nothing to pad at batch 1."""
    rows = tl.arange(0, B_PAD)
    row_ok = rows < NB
    mean = tl.zeros([B_PAD], dtype=tl.float32)
    rstd = mean
    if MODE == 1:
        if not ONE:
            mean, rstd = _stats(IN, NB, K, B_PAD, BK, eps)
    for tile in range(pid, tl.cdiv(N, BN), nprog):
        offs_n = tile * BN + tl.arange(0, BN)
        n_ok = offs_n < N
        if DOT:
            acc_t = tl.zeros([BN, B_PAD], dtype=tl.float32)
        else:
            acc3 = tl.zeros([B_PAD, BN, BK], dtype=tl.float32)  # reduced once, after the last chunk
        for k0 in range(0, K, BK):
            x = _input(IN, k0, LN_W, LN_B, eps, mean, rstd, PM, PL, NB, K, H, S, B_PAD, BK, S_PAD, MODE, ONE,
                       HAS_LN_B)
            if ONE:
                w = w_pre
            else:
                offs_k = k0 + tl.arange(0, BK)
                w = tl.load(W + offs_n[:, None] * K + offs_k[None, :], mask=n_ok[:, None] & (offs_k < K)[None, :],
                            other=0.0)
            if DOT:
                acc_t = tl.dot(w, tl.trans(x.to(w.dtype)), acc_t, input_precision=PREC)
            else:
                acc3 += x[:, None, :] * w.to(tl.float32)[None, :, :]
        if DOT:
            acc = tl.trans(acc_t)
        else:
            acc = tl.sum(acc3, 2)
        if HAS_BIAS:
            acc += tl.load(BIAS + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        out_ok = row_ok[:, None] & n_ok[None, :]
        if RESID:
            acc += tl.load(RES + rows[:, None] * N + offs_n[None, :], mask=out_ok, other=0.0, cache_modifier=".cg")
        tl.store(OUT + rows[:, None] * N + offs_n[None, :], acc, mask=out_ok)
        if HAS_OUT2:
            if HAS_BIAS2:
                acc += tl.load(BIAS2 + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
            tl.store(OUT2 + rows[:, None] * N + offs_n[None, :], acc, mask=out_ok)
        if CACHE:  # columns C..2C are k, 2C..3C are v: slot pos of head c // D
            C: tl.constexpr = N // 3
            D: tl.constexpr = C // H
            c = offs_n % C
            slot = ((rows[:, None] * H + c[None, :] // D) * W_CACHE + pos) * D + c[None, :] % D
            part = offs_n // C
            tl.store(KC + slot, acc.to(KC.dtype.element_ty), mask=out_ok & (part == 1)[None, :])
            tl.store(VC + slot, acc.to(VC.dtype.element_ty), mask=out_ok & (part == 2)[None, :])


@triton.jit
def _mlp(pid, nprog, wfc_pre, wp2_pre, X2, W_FC, B_FC, W_P2T, X, LN_W, LN_B, eps, NB: tl.constexpr,
         C: tl.constexpr, B_PAD: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BC: tl.constexpr,
         ONE: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_LN_B: tl.constexpr, DOT: tl.constexpr,
         PREC: tl.constexpr):
    """The whole MLP in one phase: each program takes BN hidden units, h = GELU(LN2(x2) W_fc^T
    (+b)) for them, and adds their share h W_proj2[:, units]^T into X (which the proj phase set
    to x2 (+ b_proj2)) with fp32 atomics. One barrier less per layer than a separate proj2
    phase; the sum's order varies from run to run, so fp32 results can differ in the last bits.
    W_P2T is W_proj2 transposed (4C, C): a program's units are contiguous rows."""
    rows = tl.arange(0, B_PAD)
    row_ok = rows < NB
    mean = tl.zeros([B_PAD], dtype=tl.float32)
    rstd = mean
    if not ONE:
        mean, rstd = _stats(X2, NB, C, B_PAD, BK, eps)
    for tile in range(pid, tl.cdiv(4 * C, BN), nprog):
        offs_n = tile * BN + tl.arange(0, BN)
        n_ok = offs_n < 4 * C
        if DOT:
            h_t = tl.zeros([BN, B_PAD], dtype=tl.float32)
        else:
            h3 = tl.zeros([B_PAD, BN, BK], dtype=tl.float32)  # reduced once, after the last chunk
        for k0 in range(0, C, BK):
            x = _input(X2, k0, LN_W, LN_B, eps, mean, rstd, X2, X2, NB, C, 1, 1, B_PAD, BK, 1, 1, ONE, HAS_LN_B)
            if ONE:
                w = wfc_pre
            else:
                offs_k = k0 + tl.arange(0, BK)
                w = tl.load(W_FC + offs_n[:, None] * C + offs_k[None, :],
                            mask=n_ok[:, None] & (offs_k < C)[None, :], other=0.0)
            if DOT:
                h_t = tl.dot(w, tl.trans(x.to(w.dtype)), h_t, input_precision=PREC)
            else:
                h3 += x[:, None, :] * w.to(tl.float32)[None, :, :]
        if DOT:
            h = tl.trans(h_t)
        else:
            h = tl.sum(h3, 2)
        if HAS_BIAS:
            h += tl.load(B_FC + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        h = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))  # exact (erf) GELU, as F.gelu
        for c0 in range(0, C, BC):
            offs_c = c0 + tl.arange(0, BC)
            c_ok = offs_c < C
            if ONE:
                w2 = wp2_pre
            else:
                w2 = tl.load(W_P2T + offs_n[:, None] * C + offs_c[None, :], mask=n_ok[:, None] & c_ok[None, :],
                             other=0.0)
            if DOT:
                part = tl.dot(h.to(w2.dtype), w2, input_precision=PREC)
            else:
                part = tl.sum(h[:, :, None] * w2.to(tl.float32)[None, :, :], 1)
            tl.atomic_add(X + rows[:, None] * C + offs_c[None, :], part, mask=row_ok[:, None] & c_ok[None, :],
                          sem="relaxed", scope="gpu")


@triton.jit
def _attention(pid, nprog, QKV, KC, VC, PM, PL, PA, pos, scale, NB: tl.constexpr, H: tl.constexpr,
               D: tl.constexpr, W_CACHE: tl.constexpr, S: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr):
    """The new query of every (row, head) against cache slots 0..pos, the slots cut into S splits
    (one item each): an online softmax per split, left unnormalised for the proj phase to combine."""
    C: tl.constexpr = H * D
    offs_d = tl.arange(0, BD)
    d_ok = offs_d < D
    n_slots = pos + 1
    chunk = tl.cdiv(n_slots, S)
    for item in range(pid, NB * H * S, nprog):
        s = item % S
        bh = item // S
        b = bh // H
        h = bh % H
        q = tl.load(QKV + b * 3 * C + h * D + offs_d, mask=d_ok, other=0.0, cache_modifier=".cg")
        lo = s * chunk
        hi = tl.minimum(lo + chunk, n_slots)
        base = bh * W_CACHE * D
        m = tl.max(tl.full([BD], NEG, tl.float32), 0)
        l = m * 0.0
        acc = tl.zeros([BD], dtype=tl.float32)
        for t0 in range(lo, hi, BT):
            offs_t = t0 + tl.arange(0, BT)
            t_ok = offs_t < hi
            kv_ok = t_ok[:, None] & d_ok[None, :]
            k = tl.load(KC + base + offs_t[:, None] * D + offs_d[None, :], mask=kv_ok, other=0.0,
                        cache_modifier=".cg").to(tl.float32)
            v = tl.load(VC + base + offs_t[:, None] * D + offs_d[None, :], mask=kv_ok, other=0.0,
                        cache_modifier=".cg").to(tl.float32)
            sc = tl.where(t_ok, tl.sum(k * q[None, :], 1) * scale, NEG)
            m_new = tl.maximum(m, tl.max(sc, 0))
            p = tl.where(t_ok, tl.exp(sc - m_new), 0.0)
            alpha = tl.exp(m - m_new)
            acc = acc * alpha + tl.sum(p[:, None] * v, 0)
            l = l * alpha + tl.sum(p, 0)
            m = m_new
        stat = (s * NB + b) * H + h
        tl.store(PM + stat, m)
        tl.store(PL + stat, l)
        tl.store(PA + (s * NB + b) * C + h * D + offs_d, acc, mask=d_ok)


@triton.jit
def _sample_embed(pid, nprog, LOGITS, NOISE, OUT, t, WTE, WPE, X, pos_next, temperature, top_k,
                  NB: tl.constexpr, V: tl.constexpr, C: tl.constexpr, TOTAL: tl.constexpr, W_CACHE: tl.constexpr,
                  VP: tl.constexpr, CP: tl.constexpr, CH: tl.constexpr, GREEDY: tl.constexpr,
                  TOP_K: tl.constexpr):
    """Row b's token for column t (decode/sampling.py's rule: greedy, or Gumbel-max over
    logits / temperature with everything below the k-th largest dropped), then the next step's
    input x = wte[token] + wpe[pos_next]."""
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
        tl.store(X + b * C + offs_c, x, mask=ok)


