"""The Triton kernels behind kernels/triton_attention.py (FlashAttention-2 style): the forward
(O and the base-2 log-sum-exp of each row) and the one-launch backward (dK/dV programs for key
tiles and dQ programs for query tiles, delta = rowsum(dO*O) formed where it is needed, no
atomics), each autotuned over a few tiles per power-of-two bucket of (Tq, Tk). Attention dropout
is fused through kernels/triton_dropout.py."""
import inspect
import os

import triton
import triton.language as tl
from triton.testing import do_bench

from .triton_dropout import kept, load_seed, row_keys

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def _cfg(bm, bn, warps, stages):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=stages)


if INTERPRET:  # one config each: nothing to tune on CPU, and BLOCK_M != BLOCK_N tests the index math
    FWD_CONFIGS = [_cfg(32, 16, 4, 1)]
    BWD_CONFIGS = [_cfg(16, 32, 4, 1)]
else:  # the winners of a per-tile sweep on the H200 at T 256-2048, head dim 64 and 128 (bf16), the
    # fp32 (TF32) winners at T 256, and small tiles for short queries (decoding)
    FWD_CONFIGS = [_cfg(16, 64, 4, 2), _cfg(32, 64, 2, 2), _cfg(64, 32, 4, 3), _cfg(64, 64, 4, 1),
                   _cfg(64, 64, 4, 2), _cfg(64, 64, 4, 3), _cfg(128, 32, 4, 2), _cfg(128, 32, 8, 3),
                   _cfg(128, 64, 8, 3), _cfg(128, 64, 8, 4), _cfg(128, 128, 8, 3)]
    # BLOCK_M: the program's own rows (keys for dK/dV, queries for dQ); BLOCK_N: the loop step
    BWD_CONFIGS = [_cfg(16, 16, 2, 1), _cfg(32, 32, 4, 1), _cfg(64, 16, 4, 2), _cfg(64, 16, 4, 3), _cfg(64, 32, 4, 2),
                   _cfg(64, 32, 4, 3), _cfg(64, 64, 4, 2), _cfg(64, 64, 4, 3), _cfg(128, 64, 8, 1),
                   _cfg(128, 64, 8, 2)]


def _prune(configs, named_args, **kwargs):
    """Drop tiles far larger than the sequence (Tq=1 decode needs no 128-row tile)."""
    tq, tk = named_args["TQ_KEY"], named_args["TK_KEY"]
    ok = [c for c in configs if c.kwargs["BLOCK_M"] <= max(16, tq) and c.kwargs["BLOCK_N"] <= max(16, tk)]
    return ok or [min(configs, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"])]


def _bench(fn, quantiles):
    # the default 25 ms warm-up + 100 ms per config makes first calls slow; these kernels are µs
    return do_bench(fn, warmup=5, rep=20, quantiles=quantiles)


# BH_KEY: the power-of-two bucket of batch x heads -- with few (b, h) pairs a smaller tile fills the
# SMs that a large one would leave idle. A tuned choice is kept in Triton's cache directory
# (cache_results), so a new process launches it without timing the configs again.
_TUNE = dict(key=["TQ_KEY", "TK_KEY", "BH_KEY", "HEAD_DIM", "CAUSAL", "PREC", "DROPOUT"],
             prune_configs_by={"early_config_prune": _prune}, do_bench=_bench,
             **({"cache_results": True} if "cache_results" in inspect.signature(triton.autotune).parameters else {}))
# lengths vary (ragged tiles, decode): one compiled kernel for all of them
_NOSPEC = ["T_Q", "T_K", "TQ_KEY", "TK_KEY", "BH_KEY"]


@triton.jit
def _load_kv(K, V, cols, skt, svt, offs_d, T_K, MASK: tl.constexpr):
    """One (BLOCK_N, D) tile of K and of V; rows past T_K read as 0 on ragged tiles."""
    if MASK:
        kv_ok = (cols < T_K)[:, None]
        k = tl.load(K + cols[:, None] * skt + offs_d[None, :], mask=kv_ok, other=0.0)
        v = tl.load(V + cols[:, None] * svt + offs_d[None, :], mask=kv_ok, other=0.0)
    else:
        k = tl.load(K + cols[:, None] * skt + offs_d[None, :])
        v = tl.load(V + cols[:, None] * svt + offs_d[None, :])
    return k, v


@triton.jit
def _visible(rows, cols, off, T_K, CAUSAL: tl.constexpr):
    """(BLOCK_M, BLOCK_N): key exists and, when causal, is not after the query (bottom-right)."""
    ok = cols[None, :] < T_K
    if CAUSAL:
        ok = ok & (cols[None, :] <= rows[:, None] + off)
    return ok


@triton.jit
def _fwd_inner(acc, m_i, l_i, q, K, V, skt, svt, lo, hi, rows, offs_n, offs_d, qk_scale, off, T_K,
               drop_thr, rkeys, MASK: tl.constexpr, CAUSAL: tl.constexpr, PREC: tl.constexpr,
               DROPOUT: tl.constexpr, BLOCK_N: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k, v = _load_kv(K, V, cols, skt, svt, offs_d, T_K, MASK)
        s = tl.dot(q, tl.trans(k), input_precision=PREC)
        if MASK:  # ragged or diagonal tile
            s = tl.where(_visible(rows, cols, off, T_K, CAUSAL), s, float("-inf"))
        # online softmax: m_i is finite after the first tile, since every row sees key 0. The scale
        # (> 0) goes into the row max and then into one fused multiply-add per score, not a pass of
        # its own over the tile (a few % on the H200 at head dim 128).
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        p = tl.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)  # the softmax sum sees every key, kept or dropped
        if DROPOUT:
            p = tl.where(kept(rkeys[:, None], cols[None, :], drop_thr), p, 0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PREC)
        m_i = m_new
    return acc, m_i, l_i


@triton.autotune(FWD_CONFIGS, **_TUNE)
@triton.jit(do_not_specialize=_NOSPEC)
def _fwd_kernel(Q, K, V, O, LSE, SEED, drop_thr, keep_scale, qk_scale, sqb, sqh, sqt, skb, skh, skt, svb, svh, svt,
                H, T_Q, T_K, TQ_KEY, TK_KEY, BH_KEY,
                HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, PREC: tl.constexpr, DROPOUT: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # last (heaviest under causal) query tiles launch first
    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    bh = tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    Q += b * sqb + h * sqh
    K += b * skb + h * skh
    V += b * svb + h * svh
    rows = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = rows < T_Q
    q = tl.load(Q + rows[:, None] * sqt + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    off = T_K - T_Q  # query row i sits at key position i + off
    if CAUSAL:  # key tiles before n_full are visible to every row: no mask there
        n_full = tl.minimum((start_m + off + 1) // BLOCK_N, T_K // BLOCK_N) * BLOCK_N
        hi = tl.minimum(start_m + BLOCK_M + off, T_K)
    else:
        n_full = (T_K // BLOCK_N) * BLOCK_N
        hi = T_K
    # O and LSE are ours, contiguous: (B*H, T_Q, D) and (B*H, T_Q)
    o_rows = bh.to(tl.int64) * T_Q + rows
    rkeys = row_keys(load_seed(SEED, DROPOUT), o_rows, DROPOUT)
    acc, m_i, l_i = _fwd_inner(acc, m_i, l_i, q, K, V, skt, svt, 0, n_full, rows, offs_n, offs_d, qk_scale, off,
                               T_K, drop_thr, rkeys, False, CAUSAL, PREC, DROPOUT, BLOCK_N)
    acc, m_i, l_i = _fwd_inner(acc, m_i, l_i, q, K, V, skt, svt, n_full, hi, rows, offs_n, offs_d, qk_scale, off,
                               T_K, drop_thr, rkeys, True, CAUSAL, PREC, DROPOUT, BLOCK_N)
    acc = acc * (keep_scale / l_i)[:, None]  # keep_scale = 1 / (1 - p)
    o_ptrs = O + (b * T_Q * H + h) * HEAD_DIM + rows[:, None] * (H * HEAD_DIM) + offs_d[None, :]
    tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=row_ok[:, None])
    tl.store(LSE + o_rows, m_i + tl.log2(l_i), mask=row_ok)


@triton.jit
def _dkdv_inner(dk, dv, k, v, Q, DO, O, LSE, DQA, sqt, sdt, so, sat, lo, hi, keys, offs_m, offs_d, qk_scale, sm_scale,
                off, T_Q, seed, drop_thr, keep_scale, rng_base, HEAD_DIM: tl.constexpr, MASK: tl.constexpr,
                PREC: tl.constexpr, DROPOUT: tl.constexpr, ATOMIC_DQ: tl.constexpr, BLOCK_N: tl.constexpr):
    # works on transposed scores (keys x queries) so dV = P^T dO and dK = dS^T Q need no transposes;
    # ATOMIC_DQ: also these keys' share of dQ = dS K for the queries, added into DQA (fp32)
    for start_m in range(lo, hi, BLOCK_N):
        rows = start_m + offs_m
        ok = rows < T_Q  # rows past T_Q load as zeros, so they add nothing to dK/dV
        q = tl.load(Q + rows[:, None] * sqt + offs_d[None, :], mask=ok[:, None], other=0.0)
        do = tl.load(DO + rows[:, None] * sdt + offs_d[None, :], mask=ok[:, None], other=0.0)
        o = tl.load(O + rows[:, None] * so + offs_d[None, :], mask=ok[:, None], other=0.0)
        lse = tl.load(LSE + rows, mask=ok, other=0.0)
        delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
        p_t = tl.exp2(tl.dot(k, tl.trans(q), input_precision=PREC) * qk_scale - lse[None, :])
        if MASK:
            p_t = tl.where(keys[:, None] <= rows[None, :] + off, p_t, 0.0)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PREC)
        if DROPOUT:  # the forward's mask, regenerated: dV = P_drop^T dO, dP = dP_drop * keep / (1-p)
            keep = kept(row_keys(seed, rng_base + rows, DROPOUT)[None, :], keys[:, None], drop_thr)
            dv = tl.dot(tl.where(keep, p_t * keep_scale, 0.0).to(do.dtype), do, dv, input_precision=PREC)
            dp_t = tl.where(keep, dp_t * keep_scale, 0.0)
        else:
            dv = tl.dot(p_t.to(do.dtype), do, dv, input_precision=PREC)
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk = tl.dot(ds_t, q, dk, input_precision=PREC)
        if ATOMIC_DQ:
            dq_share = tl.dot(tl.trans(ds_t), k, input_precision=PREC) * sm_scale
            tl.atomic_add(DQA + rows[:, None] * sat + offs_d[None, :], dq_share, mask=ok[:, None], sem="relaxed")
    return dk, dv


@triton.jit
def _dq_inner(dq, q, do, lse, delta, K, V, skt, svt, lo, hi, rows, offs_n, offs_d, qk_scale, off, T_K,
              drop_thr, keep_scale, rkeys, MASK: tl.constexpr, CAUSAL: tl.constexpr,
              PREC: tl.constexpr, DROPOUT: tl.constexpr, BLOCK_N: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k, v = _load_kv(K, V, cols, skt, svt, offs_d, T_K, MASK)
        p = tl.exp2(tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale - lse[:, None])
        if MASK:
            p = tl.where(_visible(rows, cols, off, T_K, CAUSAL), p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PREC)
        if DROPOUT:
            dp = tl.where(kept(rkeys[:, None], cols[None, :], drop_thr), dp * keep_scale, 0.0)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PREC)
    return dq


@triton.jit
def _dkdv_program(pid, b, h, K, V, Q, DO, O, LSE, DK, DV, DQA, skt, svt, sqt, sdt, so, sat, sgkb, sgkh, sgkt, T_Q,
                  T_K, off, seed, drop_thr, keep_scale, sm_scale, qk_scale, rng_base, HEAD_DIM: tl.constexpr,
                  CAUSAL: tl.constexpr, PREC: tl.constexpr, DROPOUT: tl.constexpr, ATOMIC_DQ: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """dK, dV for keys [pid * BLOCK_M, (pid + 1) * BLOCK_M) of one (b, h), walking the queries that
    see them (and with ATOMIC_DQ their share of dQ, into DQA)."""
    offs_d = tl.arange(0, HEAD_DIM)
    start_n = pid * BLOCK_M  # first key tiles see the most queries and launch first
    keys = start_n + tl.arange(0, BLOCK_M)
    key_ok = keys < T_K
    k = tl.load(K + keys[:, None] * skt + offs_d[None, :], mask=key_ok[:, None], other=0.0)
    v = tl.load(V + keys[:, None] * svt + offs_d[None, :], mask=key_ok[:, None], other=0.0)
    dk = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    offs_m = tl.arange(0, BLOCK_N)
    if CAUSAL:  # the queries that see these keys start at lo; from m_full on they see all of them
        lo = (tl.maximum(start_n - off, 0) // BLOCK_N) * BLOCK_N
        m_full = tl.cdiv(tl.maximum(start_n + BLOCK_M - 1 - off, 0), BLOCK_N) * BLOCK_N
        m_full = tl.minimum(m_full, tl.cdiv(T_Q, BLOCK_N) * BLOCK_N)
        dk, dv = _dkdv_inner(dk, dv, k, v, Q, DO, O, LSE, DQA, sqt, sdt, so, sat, lo, m_full, keys, offs_m, offs_d,
                             qk_scale, sm_scale, off, T_Q, seed, drop_thr, keep_scale, rng_base, HEAD_DIM, True, PREC,
                             DROPOUT, ATOMIC_DQ, BLOCK_N)
    else:
        m_full = 0
    dk, dv = _dkdv_inner(dk, dv, k, v, Q, DO, O, LSE, DQA, sqt, sdt, so, sat, m_full, T_Q, keys, offs_m, offs_d,
                         qk_scale, sm_scale, off, T_Q, seed, drop_thr, keep_scale, rng_base, HEAD_DIM, False, PREC,
                         DROPOUT, ATOMIC_DQ, BLOCK_N)
    out = b * sgkb + h * sgkh + keys[:, None] * sgkt + offs_d[None, :]
    tl.store(DK + out, (dk * sm_scale).to(DK.dtype.element_ty), mask=key_ok[:, None])
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=key_ok[:, None])


@triton.autotune(BWD_CONFIGS, **_TUNE)
@triton.jit(do_not_specialize=_NOSPEC)
def _bwd_kernel(Q, K, V, DO, O, LSE, DQ, DK, DV, SEED, drop_thr, keep_scale, sm_scale, qk_scale,
                sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, sdb, sdh, sdt, sgqb, sgqh, sgqt, sgkb, sgkh, sgkt,
                H, T_Q, T_K, TQ_KEY, TK_KEY, BH_KEY,
                HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, PREC: tl.constexpr, DROPOUT: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # programs [0, n_kv) do dK/dV for one key tile each, the rest dQ for one query tile each
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    Q += b * sqb + h * sqh
    K += b * skb + h * skh
    V += b * svb + h * svh
    DO += b * sdb + h * sdh
    # ours: LSE (B*H, T_Q) contiguous, O (B, T, H, D) in memory (see _bthd); dQ (sgq*) and dK, dV
    # (sgk*) at their strides: (B, T, H, D) too, or views of one (B, T, 3, H, D) buffer (_grads_like)
    so = H * HEAD_DIM
    O += (b * T_Q * H + h) * HEAD_DIM
    LSE += bh.to(tl.int64) * T_Q
    offs_d = tl.arange(0, HEAD_DIM)
    off = T_K - T_Q  # query row i sits at key position i + off
    seed = load_seed(SEED, DROPOUT)
    rng_base = bh.to(tl.int64) * T_Q
    if pid < tl.cdiv(T_K, BLOCK_M):  # dK, dV for keys [pid * BLOCK_M, (pid + 1) * BLOCK_M)
        _dkdv_program(pid, b, h, K, V, Q, DO, O, LSE, DK, DV, DQ, skt, svt, sqt, sdt, so, 0, sgkb, sgkh, sgkt, T_Q, T_K,
                      off, seed, drop_thr, keep_scale, sm_scale, qk_scale, rng_base, HEAD_DIM, CAUSAL, PREC, DROPOUT,
                      False, BLOCK_M, BLOCK_N)
    else:  # dQ for queries [start_m, start_m + BLOCK_M): walk the keys they see, like the forward
        start_m = (tl.num_programs(0) - 1 - pid) * BLOCK_M  # heaviest (last) query tiles first
        rows = start_m + tl.arange(0, BLOCK_M)
        ok = rows < T_Q
        q = tl.load(Q + rows[:, None] * sqt + offs_d[None, :], mask=ok[:, None], other=0.0)
        do = tl.load(DO + rows[:, None] * sdt + offs_d[None, :], mask=ok[:, None], other=0.0)
        o = tl.load(O + rows[:, None] * so + offs_d[None, :], mask=ok[:, None], other=0.0)
        lse = tl.load(LSE + rows, mask=ok, other=0.0)
        delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
        dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        offs_n = tl.arange(0, BLOCK_N)
        if CAUSAL:
            n_full = tl.minimum((start_m + off + 1) // BLOCK_N, T_K // BLOCK_N) * BLOCK_N
            hi = tl.minimum(start_m + BLOCK_M + off, T_K)
        else:
            n_full = (T_K // BLOCK_N) * BLOCK_N
            hi = T_K
        rkeys = row_keys(seed, rng_base + rows, DROPOUT)
        dq = _dq_inner(dq, q, do, lse, delta, K, V, skt, svt, 0, n_full, rows, offs_n, offs_d, qk_scale, off, T_K,
                       drop_thr, keep_scale, rkeys, False, CAUSAL, PREC, DROPOUT, BLOCK_N)
        dq = _dq_inner(dq, q, do, lse, delta, K, V, skt, svt, n_full, hi, rows, offs_n, offs_d, qk_scale, off, T_K,
                       drop_thr, keep_scale, rkeys, True, CAUSAL, PREC, DROPOUT, BLOCK_N)
        out = b * sgqb + h * sgqh + rows[:, None] * sgqt + offs_d[None, :]
        tl.store(DQ + out, (dq * sm_scale).to(DQ.dtype.element_ty), mask=ok[:, None])


# dQ in fp32 atomics (attention.dq=atomic): every tuning run adds into DQA, so it starts at zero each time
@triton.autotune(BWD_CONFIGS, reset_to_zero=["DQA"], **_TUNE)
@triton.jit(do_not_specialize=_NOSPEC)
def _bwd_atomic_kernel(Q, K, V, DO, O, LSE, DQA, DK, DV, SEED, drop_thr, keep_scale, sm_scale, qk_scale,
                       sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, sdb, sdh, sdt, sgkb, sgkh, sgkt,
                       H, T_Q, T_K, TQ_KEY, TK_KEY, BH_KEY,
                       HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, PREC: tl.constexpr, DROPOUT: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The backward in one kind of program: each key tile's dK, dV and its share of dQ = dS K * scale,
    added into DQA (fp32, (B, T, H, D) in memory, zero at launch): five products a tile where
    _bwd_kernel's dQ programs compute the scores and dP a second time (seven)."""
    bh = tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    so = H * HEAD_DIM
    _dkdv_program(tl.program_id(0), b, h, K + b * skb + h * skh, V + b * svb + h * svh, Q + b * sqb + h * sqh,
                  DO + b * sdb + h * sdh, O + (b * T_Q * H + h) * HEAD_DIM, LSE + bh.to(tl.int64) * T_Q, DK, DV,
                  DQA + (b * T_Q * H + h) * HEAD_DIM, skt, svt, sqt, sdt, so, so, sgkb, sgkh, sgkt, T_Q, T_K,
                  T_K - T_Q, load_seed(SEED, DROPOUT), drop_thr, keep_scale, sm_scale, qk_scale,
                  bh.to(tl.int64) * T_Q, HEAD_DIM, CAUSAL, PREC, DROPOUT, True, BLOCK_M, BLOCK_N)
