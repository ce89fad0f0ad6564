"""decode=persistent: a whole run of decode steps -- every layer of every token, the logits and
the sampling -- in ONE Triton launch.

At batch 1 a token is ~40 dependent phases of tiny work (LayerNorm, four matvecs, attention over
the cache, the head, the sample), so a launch (or a graph node) per phase sets the time, not
bandwidth. Here a grid of at most one program per SM stays resident for the whole run and the
phases are separated by grid-wide barriers (an atomic counter every program adds to and waits
on), so one token costs PHASES barriers instead of ~40 launches:

  once:              embed        x = wte[out[t-1]] + wpe[pos]
  per layer:     1.  qkv          qkv = LN1(x) W_attn^T (+b); k, v written into the static cache
                 2.  attention    split over the cache: partial (max, sum, acc) per split
                 3.  proj         x2 = x + combine(partials) W_proj^T (+b)
                 4.  fc           h = GELU(LN2(x2) W_fc^T (+b))
                 5.  proj2        x = x2 + h W_proj2^T (+b)
  per token:         head         logits[t] = LN_f(x) wte^T
                     sample       out[t] = argmax(logits / T + gumbel[t]) (top-k first), x = embed(out[t])

Every phase spreads its tiles over the programs; tiles are chosen from the shape so each program
loads its weights in as few rounds as possible (plan()). Accumulation is fp32; the residual
stream, q/k/v and the MLP hidden state stay fp32 in scratch buffers; the cache keeps the weights'
dtype, as every other path's does. Data written by one program and read by another after a
barrier is loaded with cache_modifier=".cg" (from L2, never a stale L1 line).

The grid must be co-resident (at most one program per SM, nothing else running), or the barrier
never opens. Under TRITON_INTERPRET=1 the programs run one after another, so the grid is one
program there and every barrier passes at once: the same code runs on CPU in the tests.
"""
import triton
import triton.language as tl

LAYER_PHASES = ("qkv", "attention", "proj", "fc", "proj2")
TOKEN_PHASES = ("head", "sample")
# module constants a @triton.jit body reads must be tl.constexpr
PHASES_PER_LAYER = tl.constexpr(len(LAYER_PHASES))
PHASES_PER_TOKEN_EXTRA = tl.constexpr(len(TOKEN_PHASES))
NEG = tl.constexpr(-1.0e30)  # a finite "minus infinity": an empty split's max (exp(NEG - NEG) must not be NaN)


@triton.jit
def _acquire_load(BAR):
    return tl.inline_asm_elementwise("ld.acquire.gpu.global.b32 $0, [$1];", "=r,l", [BAR], dtype=tl.int32,
                                     is_pure=False, pack=1)


@triton.jit
def _grid_sync(BAR, target, SPIN: tl.constexpr):
    """Wait until every program has arrived here `target // num_programs` times. The release add
    publishes this program's stores; the acquire reads make the others' visible. SPIN 1 polls
    with acquire loads (no read-modify-write traffic on the counter's L2 line while the last
    programs try to arrive), SPIN 0 with atomic adds of 0 (what the interpreter can run)."""
    tl.debug_barrier()  # every thread of this program has issued its stores
    tl.atomic_add(BAR, 1, sem="release", scope="gpu")
    if SPIN == 1:
        seen = _acquire_load(BAR)
        while seen < target:
            seen = _acquire_load(BAR)
    else:
        seen = tl.atomic_add(BAR, 0, sem="acquire", scope="gpu")
        while seen < target:
            seen = tl.atomic_add(BAR, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()


@triton.jit
def _stamp(PROF, index, PROFILE: tl.constexpr):
    if PROFILE:
        if tl.program_id(0) == 0:
            tl.store(PROF + index, tl.extra.cuda.globaltimer())


@triton.jit
def _matvec(pid, nprog, IN, W, BIAS, RES, OUT, LN_W, LN_B, eps, PM, PL,
            KC, VC, pos, NB: tl.constexpr, N: tl.constexpr, K: tl.constexpr, H: tl.constexpr, W_CACHE: tl.constexpr,
            S: tl.constexpr, B_PAD: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, S_PAD: tl.constexpr,
            MODE: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_LN_B: tl.constexpr, GELU: tl.constexpr,
            RESID: tl.constexpr, CACHE: tl.constexpr):
    """OUT[b, n] = (RES[b, n] +) act(in(b) . W[n, :] (+ BIAS[n])) for every row b < NB, over this
    program's tiles of BN outputs. in(b) by MODE: 0 IN[b] as is, 1 LayerNorm(IN[b]),
    2 the attention output, combined from the S split partials (PM max, PL sum, IN acc).
    CACHE: the qkv matvec also writes k and v at slot `pos` of the (B, H, W, D) caches."""
    rows = tl.arange(0, B_PAD)
    row_ok = rows < NB
    if MODE == 1:  # row statistics once per phase (a few hundred values per row)
        s1 = tl.zeros([B_PAD, BK], dtype=tl.float32)
        s2 = tl.zeros([B_PAD, BK], dtype=tl.float32)
        for k0 in range(0, K, BK):
            offs_k = k0 + tl.arange(0, BK)
            ok = row_ok[:, None] & (offs_k < K)[None, :]
            x = tl.load(IN + rows[:, None] * K + offs_k[None, :], mask=ok, other=0.0, cache_modifier=".cg")
            s1 += x
            s2 += x * x
        mean = tl.sum(s1, 1) / K
        rstd = 1.0 / tl.sqrt(tl.sum(s2, 1) / K - mean * mean + eps)
    for tile in range(pid, tl.cdiv(N, BN), nprog):
        offs_n = tile * BN + tl.arange(0, BN)
        n_ok = offs_n < N
        acc = tl.zeros([B_PAD, BN], dtype=tl.float32)
        for k0 in range(0, K, BK):
            offs_k = k0 + tl.arange(0, BK)
            k_ok = offs_k < K
            ok = row_ok[:, None] & k_ok[None, :]
            if MODE == 2:  # y = sum_s exp(m_s - M) acc_s / sum_s exp(m_s - M) l_s, per head
                splits = tl.arange(0, S_PAD)
                head = offs_k // (K // H)
                ok3 = (splits < S)[:, None, None] & ok[None, :, :]
                stat = (splits[:, None, None] * NB + rows[None, :, None]) * H + head[None, None, :]
                m = tl.load(PM + stat, mask=ok3, other=NEG, cache_modifier=".cg")
                big_m = tl.max(m, 0)
                f = tl.exp(m - big_m[None, :, :])
                den = tl.sum(f * tl.load(PL + stat, mask=ok3, other=0.0, cache_modifier=".cg"), 0)
                a = tl.load(IN + (splits[:, None, None] * NB + rows[None, :, None]) * K + offs_k[None, None, :],
                            mask=ok3, other=0.0, cache_modifier=".cg")
                x = tl.where(ok, tl.sum(f * a, 0) / tl.where(ok, den, 1.0), 0.0)
            else:
                x = tl.load(IN + rows[:, None] * K + offs_k[None, :], mask=ok, other=0.0, cache_modifier=".cg")
                if MODE == 1:
                    x = (x - mean[:, None]) * rstd[:, None]
                    x = x * tl.load(LN_W + offs_k, mask=k_ok, other=0.0).to(tl.float32)[None, :]
                    if HAS_LN_B:
                        x += tl.load(LN_B + offs_k, mask=k_ok, other=0.0).to(tl.float32)[None, :]
                    x = tl.where(ok, x, 0.0)
            w = tl.load(W + offs_n[:, None] * K + offs_k[None, :], mask=n_ok[:, None] & k_ok[None, :],
                        other=0.0).to(tl.float32)
            acc += tl.sum(x[:, None, :] * w[None, :, :], 2)
        if HAS_BIAS:
            acc += tl.load(BIAS + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        if GELU:  # exact (erf) GELU, as F.gelu
            acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
        out_ok = row_ok[:, None] & n_ok[None, :]
        if RESID:
            acc += tl.load(RES + rows[:, None] * N + offs_n[None, :], mask=out_ok, other=0.0, cache_modifier=".cg")
        tl.store(OUT + rows[:, None] * N + offs_n[None, :], acc, mask=out_ok)
        if CACHE:  # columns C..2C are k, 2C..3C are v: slot pos of head c // D
            C: tl.constexpr = N // 3
            D: tl.constexpr = C // H
            c = offs_n % C
            slot = ((rows[:, None] * H + c[None, :] // D) * W_CACHE + pos) * D + c[None, :] % D
            part = offs_n // C
            tl.store(KC + slot, acc.to(KC.dtype.element_ty), mask=out_ok & (part == 1)[None, :])
            tl.store(VC + slot, acc.to(VC.dtype.element_ty), mask=out_ok & (part == 2)[None, :])


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


@triton.jit(do_not_specialize=["n_steps", "top_k"])
def _decode_run_kernel(OUT, T_PTR, POS_PTR, NOISE, LOGITS, BAR, PROF,
                       WTE, WPE, LN1_W, LN1_B, W_QKV, B_QKV, W_O, B_O, LN2_W, LN2_B, W_FC, B_FC, W_P2, B_P2,
                       LNF_W, LNF_B, KC, VC, X, X2, QKV, PM, PL, PA, HID,
                       n_steps, temperature, top_k, eps, scale,
                       NB: tl.constexpr, C: tl.constexpr, H: tl.constexpr, L: tl.constexpr, V: tl.constexpr,
                       W_CACHE: tl.constexpr, TOTAL: tl.constexpr, S: tl.constexpr, S_PAD: tl.constexpr,
                       B_PAD: tl.constexpr, BN_QKV: tl.constexpr, BK_QKV: tl.constexpr, BN_O: tl.constexpr,
                       BK_O: tl.constexpr, BN_FC: tl.constexpr, BK_FC: tl.constexpr, BN_P2: tl.constexpr,
                       BK_P2: tl.constexpr, BN_V: tl.constexpr, BK_V: tl.constexpr, BT: tl.constexpr,
                       BD: tl.constexpr, VP: tl.constexpr, CP: tl.constexpr, CH: tl.constexpr,
                       HAS_BIAS: tl.constexpr, HAS_LN_B: tl.constexpr, GREEDY: tl.constexpr, TOP_K: tl.constexpr,
                       PROFILE: tl.constexpr, SPIN: tl.constexpr):
    """n_steps decode steps: step i feeds out[:, t0 + i - 1] at cache slot pos0 + i and samples
    out[:, t0 + i] (t0, pos0 read from T_PTR, POS_PTR and advanced at the end)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    D: tl.constexpr = C // H
    PHASES: tl.constexpr = PHASES_PER_LAYER * L + PHASES_PER_TOKEN_EXTRA
    t0 = tl.load(T_PTR)
    pos0 = tl.load(POS_PTR)
    offs_c = tl.arange(0, CP)
    for b in range(pid, NB, nprog):  # the first input: the token the host (prefill) sampled last
        token = tl.load(OUT + b * TOTAL + t0 - 1)
        x = tl.load(WTE + token * C + offs_c, mask=offs_c < C, other=0.0).to(tl.float32) + \
            tl.load(WPE + pos0 * C + offs_c, mask=offs_c < C, other=0.0).to(tl.float32)
        tl.store(X + b * C + offs_c, x, mask=offs_c < C)
    _grid_sync(BAR, nprog, SPIN)
    _stamp(PROF, 0, PROFILE)
    for i in range(n_steps):
        t = t0 + i
        pos = pos0 + i
        done = 1 + i * PHASES  # barriers passed before this step
        for layer in range(L):
            kc = KC + layer * NB * H * W_CACHE * D
            vc = VC + layer * NB * H * W_CACHE * D
            _matvec(pid, nprog, X, W_QKV + layer * 3 * C * C, B_QKV + layer * 3 * C, X, QKV,
                    LN1_W + layer * C, LN1_B + layer * C, eps, PM, PL, kc, vc, pos,
                    NB, 3 * C, C, H, W_CACHE, S, B_PAD, BN_QKV, BK_QKV, S_PAD, 1, HAS_BIAS, HAS_LN_B, False, False,
                    True)
            base = done + layer * PHASES_PER_LAYER
            _grid_sync(BAR, (base + 1) * nprog, SPIN)
            _stamp(PROF, i * PHASES + layer * PHASES_PER_LAYER + 1, PROFILE)
            _attention(pid, nprog, QKV, kc, vc, PM, PL, PA, pos, scale, NB, H, D, W_CACHE, S, BT, BD)
            _grid_sync(BAR, (base + 2) * nprog, SPIN)
            _stamp(PROF, i * PHASES + layer * PHASES_PER_LAYER + 2, PROFILE)
            _matvec(pid, nprog, PA, W_O + layer * C * C, B_O + layer * C, X, X2, LN1_W, LN1_B, eps, PM, PL,
                    kc, vc, pos, NB, C, C, H, W_CACHE, S, B_PAD, BN_O, BK_O, S_PAD, 2, HAS_BIAS, False, False, True,
                    False)
            _grid_sync(BAR, (base + 3) * nprog, SPIN)
            _stamp(PROF, i * PHASES + layer * PHASES_PER_LAYER + 3, PROFILE)
            _matvec(pid, nprog, X2, W_FC + layer * 4 * C * C, B_FC + layer * 4 * C, X2, HID,
                    LN2_W + layer * C, LN2_B + layer * C, eps, PM, PL, kc, vc, pos,
                    NB, 4 * C, C, H, W_CACHE, S, B_PAD, BN_FC, BK_FC, S_PAD, 1, HAS_BIAS, HAS_LN_B, True, False,
                    False)
            _grid_sync(BAR, (base + 4) * nprog, SPIN)
            _stamp(PROF, i * PHASES + layer * PHASES_PER_LAYER + 4, PROFILE)
            _matvec(pid, nprog, HID, W_P2 + layer * 4 * C * C, B_P2 + layer * C, X2, X, LN1_W, LN1_B, eps, PM, PL,
                    kc, vc, pos, NB, C, 4 * C, H, W_CACHE, S, B_PAD, BN_P2, BK_P2, S_PAD, 0, HAS_BIAS, False, False,
                    True, False)
            _grid_sync(BAR, (base + 5) * nprog, SPIN)
            _stamp(PROF, i * PHASES + layer * PHASES_PER_LAYER + 5, PROFILE)
        logits = LOGITS + t * NB * V
        _matvec(pid, nprog, X, WTE, WTE, X, logits, LNF_W, LNF_B, eps, PM, PL, KC, VC, pos,
                NB, V, C, H, W_CACHE, S, B_PAD, BN_V, BK_V, S_PAD, 1, False, HAS_LN_B, False, False, False)
        _grid_sync(BAR, (done + PHASES - 1) * nprog, SPIN)
        _stamp(PROF, i * PHASES + PHASES - 1, PROFILE)
        _sample_embed(pid, nprog, logits, NOISE + t * NB * V, OUT, t, WTE, WPE, X, pos + 1, temperature, top_k,
                      NB, V, C, TOTAL, W_CACHE, VP, CP, CH, GREEDY, TOP_K)
        _grid_sync(BAR, (done + PHASES) * nprog, SPIN)
        _stamp(PROF, i * PHASES + PHASES, PROFILE)
    if pid == 0:
        tl.store(T_PTR, t0 + n_steps)
        tl.store(POS_PTR, pos0 + n_steps)
