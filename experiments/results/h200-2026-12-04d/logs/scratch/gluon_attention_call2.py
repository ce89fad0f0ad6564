"""A Hopper (sm_90) forward for kernels/triton_attention.py, in Gluon: Triton's lower-level
language, where layouts, shared memory, TMA copies and asynchronous warp-group MMAs are explicit.

Why: Triton's compiler waits on each tl.dot right after issuing it, so in the tl forward a warp
group's tensor cores idle while it does the softmax, and the softmax units idle while it does the
products (sm_90 TTGIR of kernels/triton_attention_kernels.py: every warp_group_dot_wait has
pendings = 0). Here each iteration issues tile j+1's scores S = Q K^T, does tile j's softmax while
they run, then issues P V and waits only for S, so tile j+1's softmax runs under tile j's P V:

    S_{j+1} = Q K_{j+1}^T  (async)  | softmax(S_j) -> P_j, alpha_j
    wait for P_{j-1} V_{j-1}; O *= alpha_j; O += P_j V_j (async); wait for S_{j+1}

K and V tiles stream through a ring of STAGES shared-memory buffers filled by TMA, one mbarrier
each; a buffer is refilled as soon as the P V that read it has finished. Same contract as the tl
forward: O in (B, T, H, D) memory order, the base-2 log-sum-exp per row (B*H, T), bottom-right
causal, the dropout mask of kernels/triton_dropout.py (same hash, so the tl backward regenerates
it). Taken only for causal self-attention (Tq = Tk) on sm_90 in bf16/fp16 with head dim 64 or
128 and a layout TMA can address; everything else stays on the tl kernel (attention() decides).
"""
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_init, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor


@gluon.jit
def _mix(x):
    """murmur3's finalizer, as kernels/triton_dropout.mix (the backward regenerates the mask)."""
    x ^= x >> 16
    x *= 0x85EBCA6B
    x ^= x >> 13
    x *= 0xC2B2AE35
    x ^= x >> 16
    return x


@gluon.jit
def _softmax_step(s, j, m_i, l_i, rows, rkeys, qk_scale, T, drop_thr, n_full,
                  BLOCK_N: gl.constexpr, s_layout: gl.constexpr, DROPOUT: gl.constexpr):
    """Online softmax of score tile j (BLOCK_M, BLOCK_N): the new row max, P (dropped where the
    mask says; the row sum sees every key), the rescale factor of what came before."""
    cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    if j >= n_full:  # a diagonal or ragged tile
        visible = (cols[None, :] <= rows[:, None]) & (cols[None, :] < T)
        s = gl.where(visible, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, 1)
    if DROPOUT:
        h = _mix(rkeys[:, None] ^ (cols.to(gl.uint32) * 0x9E3779B9)[None, :])
        p = gl.where((h >> 8).to(gl.int32) >= drop_thr, p, 0.0)
    return p, alpha, m_new, l_i


@gluon.jit
def _load_kv(k_desc, v_desc, k_smem, v_smem, bars, t, k_row, v_row, k_col, v_col,
             BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """TMA copies of key/value tile t into ring buffer t % STAGES (one mbarrier for both)."""
    s = t % STAGES
    bar = bars.index(s)
    mbarrier.expect(bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [k_row + t * BLOCK_N, k_col], bar, k_smem.index(s))
    tma.async_copy_global_to_shared(v_desc, [v_row + t * BLOCK_N, v_col], bar, v_smem.index(s))


@gluon.jit
def _fwd_kernel(q_desc, k_desc, v_desc, O, LSE, SEED, drop_thr, keep_scale, qk_scale, H, T,
                q_rb, q_rh, q_ch, k_rb, k_rh, k_ch, v_rb, v_rh, v_ch,
                HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                DROPOUT: gl.constexpr, num_warps: gl.constexpr, VAR: gl.constexpr = 0):
    # heaviest (last) query tiles first, as the tl forward
    start_m = (gl.num_programs(0) - 1 - gl.program_id(0)) * BLOCK_M
    bh = gl.program_id(1)
    b = bh // H
    h = bh % H
    # a tensor's rows as TMA sees them: row (b, h, t) = b*rb + h*rh + t, its head's columns from h*ch
    q_row = b * q_rb + h * q_rh + start_m
    k_row = b * k_rb + h * k_rh
    v_row = b * v_rb + h * v_rh
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    dtype: gl.constexpr = q_desc.dtype
    # tile t's buffers are refilled in iteration t + 1 - STAGES, after the wait for tile j + 1 at its
    # top: with fewer than three buffers that wait would come before the refill it waits on
    gl.static_assert(STAGES >= 3)

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(bars.index(s), count=1)
    fence_async_shared()

    # causal: key tiles [0, n_tiles) hold keys <= the tile's last query; below n_full all are visible
    n_tiles = gl.cdiv(gl.minimum(start_m + BLOCK_M, T), BLOCK_N)
    n_full = gl.minimum((start_m + 1) // BLOCK_N, T // BLOCK_N)
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, h * q_ch], q_bar, q_smem)
    for t in gl.static_range(STAGES):
        if t < n_tiles:
            _load_kv(k_desc, v_desc, k_smem, v_smem, bars, t, k_row, v_row, h * k_ch, h * v_ch, BLOCK_N, STAGES)

    rows = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    o_rows = bh.to(gl.int64) * T + rows  # the dropout hash's row index and the LSE's
    if DROPOUT:
        seed = gl.load(SEED)
        k1 = _mix(o_rows.to(gl.uint32) ^ seed.to(gl.uint32))
        rkeys = _mix(k1 ^ (o_rows >> 32).to(gl.uint32) ^ (seed >> 32).to(gl.uint32))
    else:
        rkeys = rows
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BLOCK_M], gl.float32, layout=gl.SliceLayout(1, s_layout))
    # a loop-carried accumulator of asynchronous MMAs is of their token type from the start
    acc = warpgroup_mma_init(gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, layout=o_layout))
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)

    mbarrier.wait(q_bar, 0)
    mbarrier.wait(bars.index(0), 0)
    s = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
    for j in range(n_tiles - 1):
        nxt = j + 1
        mbarrier.wait(bars.index(nxt % STAGES), (nxt // STAGES) & 1)
        s_next = warpgroup_mma(q_smem, k_smem.index(nxt % STAGES).permute((1, 0)), s_zero, use_acc=False,
                               is_async=True)
        if VAR == 1:
            s_next = warpgroup_mma_wait(num_outstanding=0, deps=(s_next, ))
        p, alpha, m_i, l_i = _softmax_step(s, j, m_i, l_i, rows, rkeys, qk_scale, T, drop_thr, n_full, BLOCK_N,
                                           s_layout, DROPOUT)
        # in flight: P V of tile j-1, then S of tile j+1; the first must finish before O is rescaled
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
        if j >= 1:
            if j - 1 + STAGES < n_tiles:  # tile j-1's buffers are free again
                _load_kv(k_desc, v_desc, k_smem, v_smem, bars, j - 1 + STAGES, k_row, v_row, h * k_ch, h * v_ch,
                         BLOCK_N, STAGES)
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
        acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_smem.index(j % STAGES), acc,
                            is_async=True)
        if VAR == 2:
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s_next, ))
    last = n_tiles - 1
    p, alpha, m_i, l_i = _softmax_step(s, last, m_i, l_i, rows, rkeys, qk_scale, T, drop_thr, n_full, BLOCK_N,
                                       s_layout, DROPOUT)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_smem.index(last % STAGES), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    mbarrier.invalidate(q_bar)
    for s_ in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(s_))

    acc = acc * gl.convert_layout(keep_scale / l_i, gl.SliceLayout(1, o_layout))[:, None]
    o_r = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, o_layout))
    o_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    # O: (B, T, H, D) in memory
    o_ptrs = O + ((b.to(gl.int64) * T + o_r) * H + h)[:, None] * HEAD_DIM + o_d[None, :]
    gl.store(o_ptrs, acc.to(dtype), mask=(o_r < T)[:, None])
    gl.store(LSE + o_rows, m_i + gl.log2(l_i), mask=rows < T)


# (BLOCK_M, BLOCK_N, STAGES, num_warps) per head dim: two warp groups of 64 query rows each
CONFIGS = {64: (128, 128, 3, 8), 128: (128, 64, 3, 8)}


def _rows(t, T, D):
    """How TMA addresses (B, H, T, D) tensor t as a 2-D (rows, columns) view with 16-byte aligned
    row stride: (rb, rh, ch, row stride, n rows, n cols) with row (b, h, t) = b*rb + h*rh + t and
    its head's columns from h*ch; None if its strides allow no such view."""
    B, H = t.shape[:2]
    sb, sh, st, sd = t.stride()
    if sd != 1 or (st * t.element_size()) % 16 or t.data_ptr() % 16:
        return None
    if sh == D and sb == T * st:  # heads side by side in a row: (B, T, [3,] H, D), the model's qkv
        return T, 0, D, st, B * T, H * D if st >= H * D else None
    if sh == T * st and sb == H * sh and st >= D:  # (B, H, T, D)-like
        return H * T, T, 0, st, B * H * T, D
    return None


def supported(q, k, v, causal, device_ok=True) -> bool:
    """Whether this forward takes the call (else the tl one does)."""
    if not (causal and device_ok and q.is_cuda and q.dtype in (torch.bfloat16, torch.float16)
            and q.shape == k.shape == v.shape and q.shape[3] in CONFIGS):
        return False
    T, D = q.shape[2], q.shape[3]
    return all(_rows(x, T, D) is not None and _rows(x, T, D)[5] is not None for x in (q, k, v))


def forward(q, k, v, o, lse, sm_scale_log2, p_drop, drop_thr, seed, config=None):
    """O (a (B, H, T, D) view of (B, T, H, D) memory) and LSE ((B*H, T) fp32) for causal q, k, v."""
    B, H, T, D = q.shape
    bm, bn, stages, warps = config or CONFIGS[D]
    el = gl.bfloat16 if q.dtype == torch.bfloat16 else gl.float16
    descs, coords = [], []
    for x, block in ((q, bm), (k, bn), (v, bn)):
        rb, rh, ch, stride, n_rows, n_cols = _rows(x, T, D)
        layout = gl.NVMMASharedLayout.get_default_for([block, D], el)
        descs.append(TensorDescriptor(x, [n_rows, n_cols], [stride, 1], [block, D], layout))
        coords += [rb, rh, ch]
    grid = (triton.cdiv(T, bm), B * H)
    _fwd_kernel[grid](*descs, o, lse, lse if seed is None else seed, drop_thr, 1.0 / (1.0 - p_drop), sm_scale_log2,
                      H, T, *coords, HEAD_DIM=D, BLOCK_M=bm, BLOCK_N=bn, STAGES=stages, DROPOUT=seed is not None,
                      num_warps=warps)
    return o, lse
