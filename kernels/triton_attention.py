"""Fused causal attention in Triton, FlashAttention-2 style: forward, backward, autograd.

Tensors are (B, H, T, D) with any strides except a unit stride on D. Queries are the LAST Tq of
the Tk keys (bottom-right causal), so Tq=1 against a KV cache works. The forward writes O and
the base-2 log-sum-exp of each row; the backward recomputes P from it in ONE launch holding two
kinds of programs: dK/dV for a key tile and dQ for a query tile. Each forms delta = rowsum(dO*O)
for the rows it visits, so no preprocess launch is needed, and nothing uses atomics, so the
autotuner can re-run any kernel freely. (Measured on the H200: splitting dK/dV and dQ into two
launches, or a separate delta kernel, was slower at B 64, H 6, T 256, D 64.)

fp32 inputs go through tl.dot with TF32 tensor cores by default (allow_tf32=True); pass
allow_tf32=False for IEEE fp32. bf16/fp16 use their tensor cores with fp32 accumulation.
Attention dropout is fused (kernels/triton_dropout.py): the backward regenerates the forward's
mask from its seed; delta = rowsum(dO*O) still holds, since O is the dropped output. O and the
gradients are written in (B, T, H, D) memory order (see _bthd).

Autotuning is keyed on power-of-two buckets of (Tq, Tk) plus head dim, dtype, causal and
precision, so decoding (Tk grows by one each step) re-tunes only when Tk crosses a power of two.
After the first call for a key, the chosen config launches without the autotuner's per-call
Python: on the H200 the host launch path, not the GPU, bounded these µs-scale kernels. Under
TRITON_INTERPRET=1 (CPU tests) each kernel has a single config and nothing is timed.
"""
import math
import os

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from .triton_dropout import kept, load_seed, row_keys, seed_tensor, threshold
from .triton_launch import launch

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
poison_outputs = False  # tests set True: outputs start NaN so an unwritten element fails
force_configs = None  # tests: (fwd, bwd) dicts of BLOCK_M/BLOCK_N/num_warps/num_stages, or None
LOG2E = 1.4426950408889634
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _cfg(bm, bn, warps, stages):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=stages)


if INTERPRET:  # one config each: nothing to tune on CPU, and BLOCK_M != BLOCK_N tests the index math
    FWD_CONFIGS = [_cfg(32, 16, 4, 1)]
    BWD_CONFIGS = [_cfg(16, 32, 4, 1)]
else:  # the best few of a sweep at T=256 on the H200 (bf16 and fp32 differ), plus small tiles
    FWD_CONFIGS = [_cfg(16, 64, 4, 2), _cfg(32, 64, 2, 2), _cfg(64, 64, 4, 1), _cfg(64, 64, 4, 2),
                   _cfg(64, 64, 4, 3), _cfg(128, 32, 4, 2), _cfg(128, 64, 8, 3)]
    # BLOCK_M: the program's own rows (keys for dK/dV, queries for dQ); BLOCK_N: the loop step
    BWD_CONFIGS = [_cfg(16, 16, 2, 1), _cfg(32, 32, 4, 1), _cfg(64, 16, 4, 2), _cfg(64, 32, 4, 2),
                   _cfg(64, 32, 4, 3), _cfg(64, 64, 4, 2), _cfg(128, 64, 8, 2)]


def _prune(configs, named_args, **kwargs):
    """Drop tiles far larger than the sequence (Tq=1 decode needs no 128-row tile)."""
    tq, tk = named_args["TQ_KEY"], named_args["TK_KEY"]
    ok = [c for c in configs if c.kwargs["BLOCK_M"] <= max(16, tq) and c.kwargs["BLOCK_N"] <= max(16, tk)]
    return ok or [min(configs, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"])]


def _bench(fn, quantiles):
    # the default 25 ms warm-up + 100 ms per config makes first calls slow; these kernels are µs
    return do_bench(fn, warmup=5, rep=20, quantiles=quantiles)


_TUNE = dict(key=["TQ_KEY", "TK_KEY", "HEAD_DIM", "CAUSAL", "PREC", "DROPOUT"],
             prune_configs_by={"early_config_prune": _prune}, do_bench=_bench)
# lengths vary (ragged tiles, decode): one compiled kernel for all of them
_NOSPEC = ["T_Q", "T_K", "TQ_KEY", "TK_KEY"]


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
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
        if MASK:  # ragged or diagonal tile
            s = tl.where(_visible(rows, cols, off, T_K, CAUSAL), s, float("-inf"))
        # online softmax: m_i is finite after the first tile, since every row sees key 0
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
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
                H, T_Q, T_K, TQ_KEY, TK_KEY,
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
def _dkdv_inner(dk, dv, k, v, Q, DO, O, LSE, sqt, sdt, so, lo, hi, keys, offs_m, offs_d, qk_scale, off, T_Q,
                seed, drop_thr, keep_scale, rng_base, HEAD_DIM: tl.constexpr, MASK: tl.constexpr,
                PREC: tl.constexpr, DROPOUT: tl.constexpr, BLOCK_N: tl.constexpr):
    # works on transposed scores (keys x queries) so dV = P^T dO and dK = dS^T Q need no transposes
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
        ds_t = p_t * (dp_t - delta[None, :])
        dk = tl.dot(ds_t.to(q.dtype), q, dk, input_precision=PREC)
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


@triton.autotune(BWD_CONFIGS, **_TUNE)
@triton.jit(do_not_specialize=_NOSPEC)
def _bwd_kernel(Q, K, V, DO, O, LSE, DQ, DK, DV, SEED, drop_thr, keep_scale, sm_scale, qk_scale,
                sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, sdb, sdh, sdt,
                H, T_Q, T_K, TQ_KEY, TK_KEY,
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
    # ours: LSE (B*H, T_Q) contiguous; O, dQ, dK, dV (B, T, H, D) in memory (see _bthd)
    so = H * HEAD_DIM
    O += (b * T_Q * H + h) * HEAD_DIM
    LSE += bh.to(tl.int64) * T_Q
    offs_d = tl.arange(0, HEAD_DIM)
    off = T_K - T_Q  # query row i sits at key position i + off
    seed = load_seed(SEED, DROPOUT)
    rng_base = bh.to(tl.int64) * T_Q
    if pid < tl.cdiv(T_K, BLOCK_M):  # dK, dV for keys [start_n, start_n + BLOCK_M)
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
            dk, dv = _dkdv_inner(dk, dv, k, v, Q, DO, O, LSE, sqt, sdt, so, lo, m_full, keys, offs_m, offs_d, qk_scale,
                                 off, T_Q, seed, drop_thr, keep_scale, rng_base, HEAD_DIM, True, PREC, DROPOUT,
                                 BLOCK_N)
        else:
            m_full = 0
        dk, dv = _dkdv_inner(dk, dv, k, v, Q, DO, O, LSE, sqt, sdt, so, m_full, T_Q, keys, offs_m, offs_d, qk_scale,
                             off, T_Q, seed, drop_thr, keep_scale, rng_base, HEAD_DIM, False, PREC, DROPOUT,
                             BLOCK_N)
        out = (b * T_K * H + h) * HEAD_DIM + keys[:, None] * so + offs_d[None, :]
        tl.store(DK + out, (dk * sm_scale).to(DK.dtype.element_ty), mask=key_ok[:, None])
        tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=key_ok[:, None])
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
        out = (b * T_Q * H + h) * HEAD_DIM + rows[:, None] * so + offs_d[None, :]
        tl.store(DQ + out, (dq * sm_scale).to(DQ.dtype.element_ty), mask=ok[:, None])


def _empty(shape, dtype, device):
    if poison_outputs:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def _bthd(B, H, T, D, dtype, device):
    """A (B, H, T, D) output laid out as (B, T, H, D) in memory: the model's transpose(1, 2)
    .contiguous() after attention is then free, and so are the gradients' way back into the
    fused qkv projection (contiguous (B, H, T, D) grads cost 4 strided copies a layer)."""
    return _empty((B, T, H, D), dtype, device).transpose(1, 2)


def _bucket(t):
    return triton.next_power_of_2(max(int(t), 1))


def _unit_last(t):
    return t if t.stride(-1) == 1 else t.contiguous()


def _consts(D, causal, prec, seed):
    return dict(HEAD_DIM=D, CAUSAL=causal, PREC=prec, DROPOUT=seed is not None)


def _forward(q, k, v, causal, sm_scale, allow_tf32, p_drop=0.0, seed=None):
    B, H, t_q, D = q.shape
    t_k = k.shape[2]
    o = _bthd(B, H, t_q, D, q.dtype, q.device)
    lse = _empty((B * H, t_q), torch.float32, q.device)
    prec = "ieee" if q.dtype == torch.float32 and not allow_tf32 else "tf32"
    bq, bk = _bucket(t_q), _bucket(t_k)
    launch(_fwd_kernel, lambda c: (triton.cdiv(t_q, c["BLOCK_M"]), B * H),
           ("fwd", q.device, q.dtype, bq, bk, D, causal, prec, seed is not None),
           force_configs and force_configs[0],
           (q, k, v, o, lse, lse if seed is None else seed, threshold(p_drop), 1.0 / (1.0 - p_drop), sm_scale * LOG2E,
            *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], H, t_q, t_k, bq, bk),
           _consts(D, causal, prec, seed))
    return o, lse


def _backward(do, q, k, v, o, lse, causal, sm_scale, allow_tf32, p_drop=0.0, seed=None):
    B, H, t_q, D = q.shape
    t_k = k.shape[2]
    dq = _bthd(B, H, t_q, D, q.dtype, q.device)
    dk, dv = (_bthd(B, H, t_k, D, k.dtype, k.device) for _ in range(2))
    prec = "ieee" if q.dtype == torch.float32 and not allow_tf32 else "tf32"
    bq, bk = _bucket(t_q), _bucket(t_k)
    launch(_bwd_kernel, lambda c: (triton.cdiv(t_k, c["BLOCK_M"]) + triton.cdiv(t_q, c["BLOCK_M"]), B * H),
           ("bwd", q.device, q.dtype, bq, bk, D, causal, prec, seed is not None),
           force_configs and force_configs[1],
           (q, k, v, do, o, lse, dq, dk, dv, lse if seed is None else seed, threshold(p_drop), 1.0 / (1.0 - p_drop),
            sm_scale, sm_scale * LOG2E, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3],
            H, t_q, t_k, bq, bk), _consts(D, causal, prec, seed))
    return dq, dk, dv


class TritonAttentionFn(torch.autograd.Function):
    """dropout(softmax(q k^T * scale + causal)) v with Triton forward and backward kernels."""

    @staticmethod
    def forward(ctx, q, k, v, causal=True, sm_scale=None, allow_tf32=True, dropout_p=0.0, seed=None):
        q, k, v = _check(q, k, v, causal, dropout_p)
        sm_scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
        seed = seed_tensor(seed, q.device) if dropout_p > 0 else None
        o, lse = _forward(q, k, v, causal, sm_scale, allow_tf32, dropout_p, seed)
        ctx.save_for_backward(q, k, v, o, lse, seed)
        ctx.causal, ctx.sm_scale, ctx.allow_tf32, ctx.dropout_p = causal, sm_scale, allow_tf32, dropout_p
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse, seed = ctx.saved_tensors
        do = _unit_last(do.to(o.dtype))
        dq, dk, dv = _backward(do, q, k, v, o, lse, ctx.causal, ctx.sm_scale, ctx.allow_tf32, ctx.dropout_p, seed)
        return dq, dk, dv, None, None, None, None, None


def _check(q, k, v, causal, dropout_p=0.0):
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p={dropout_p}: need 0 <= p < 1")
    if q.dim() != 4 or k.shape != v.shape or k.dim() != 4 or q.shape[:2] != k.shape[:2] \
            or q.shape[3] != k.shape[3]:
        raise ValueError(f"expected q (B,H,Tq,D), k = v (B,H,Tk,D); got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    D, t_q, t_k = q.shape[3], q.shape[2], k.shape[2]
    if D not in (16, 32, 64, 128):
        raise ValueError(f"triton attention supports head dim 16, 32, 64 or 128, not {D}")
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"triton attention takes float32/bfloat16/float16 q, k, v of one dtype; "
                         f"got {q.dtype}, {k.dtype}, {v.dtype}")
    if t_q < 1 or t_k < 1 or (causal and t_q > t_k):
        raise ValueError(f"need 1 <= Tq <= Tk for causal attention; got Tq={t_q}, Tk={t_k}")
    if not INTERPRET and q.device.type != "cuda":
        raise ValueError("triton attention runs on CUDA tensors (or CPU ones under TRITON_INTERPRET=1)")
    return _unit_last(q), _unit_last(k), _unit_last(v)


def attention(q, k, v, causal=True, sm_scale=None, allow_tf32=True, dropout_p=0.0, seed=None):
    """Fused attention on (B, H, T, D) tensors; causal aligns queries to the last Tq keys.

    allow_tf32 (default True) lets fp32 matmuls use TF32 tensor cores (~1e-3 relative error);
    False keeps IEEE fp32. sm_scale defaults to 1/sqrt(D). dropout_p drops attention
    probabilities (kept ones scaled by 1/(1-p)), with a fresh seed from torch's RNG per call
    unless `seed` (an int) is given. Differentiable in q, k and v.
    """
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return TritonAttentionFn.apply(q, k, v, causal, sm_scale, allow_tf32, dropout_p, seed)
    q, k, v = _check(q, k, v, causal, dropout_p)  # inference (decode): no autograd bookkeeping
    sm_scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
    seed = seed_tensor(seed, q.device) if dropout_p > 0 else None
    return _forward(q, k, v, causal, sm_scale, allow_tf32, dropout_p, seed)[0]
