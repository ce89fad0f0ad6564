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
                                                              warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# TMA's global -> shared copy: async_load from Triton 3.7 on, async_copy_global_to_shared before
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared


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
def _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, q_row, k_row, v_row, q_col, k_col,
              v_col, n_tiles, GROUPS: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """One warp: the TMA copies. Q's GROUPS blocks of 64 rows once, then key/value tile t into ring
    buffer t % STAGES as soon as every consumer has released the tile that held it before."""
    mbarrier.expect(q_bar, GROUPS * q_desc.block_type.nbytes)
    for g in gl.static_range(GROUPS):
        _tma_load(q_desc, [q_row + 64 * g, q_col], q_bar, q_smem.index(g))
    for t in range(n_tiles):
        s = t % STAGES
        if t >= STAGES:
            mbarrier.wait(empty.index(s), (t // STAGES - 1) & 1)
        bar = ready.index(s)
        mbarrier.expect(bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
        _tma_load(k_desc, [k_row + t * BLOCK_N, k_col], bar, k_smem.index(s))
        _tma_load(v_desc, [v_row + t * BLOCK_N, v_col], bar, v_smem.index(s))


@gluon.jit
def _my_turn(turn, slot, G: gl.constexpr, PINGPONG: gl.constexpr):
    """Ping-pong: the two warp groups issue their MMAs by turns (slot k of group 0, then slot k of
    group 1, ...), so that one's softmax runs while the other's MMAs hold the tensor cores, rather
    than both multiplying at once and then both doing softmax with the tensor cores idle."""
    if PINGPONG:
        mbarrier.wait(turn.index(G), slot & 1)


@gluon.jit
def _your_turn(turn, G: gl.constexpr, PINGPONG: gl.constexpr):
    if PINGPONG:
        mbarrier.arrive(turn.index(1 - G), count=1)


@gluon.jit
def _consumer(q_smem, k_smem, v_smem, q_bar, ready, empty, turn, O, LSE, SEED, drop_thr, keep_scale, qk_scale, T,
              H, b, h, bh, start_m, n_tiles, G: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr,
              STAGES: gl.constexpr, DROPOUT: gl.constexpr, PINGPONG: gl.constexpr):
    """One warp group: query rows start_m + 64 G .. + 64 against every key tile, O and LSE stored.

    Per key tile j: S_j = Q K_j^T and P_{j-1} V_{j-1} issued back to back; waiting down to one MMA
    in flight leaves only the P V running while the softmax reads S_j (an MMA's registers must not
    be read while it runs, or ptxas serialises every MMA of the loop); then O is rescaled once
    the P V is done, and tile j-1's buffers are released to the producer."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    dtype: gl.constexpr = q_smem.dtype
    row0 = start_m + 64 * G
    rows = row0 + gl.arange(0, 64, layout=gl.SliceLayout(1, s_layout))
    n_full = gl.minimum((row0 + 1) // BLOCK_N, T // BLOCK_N)  # key tiles every row here sees whole
    o_rows = bh.to(gl.int64) * T + rows  # the dropout hash's row index and the LSE's
    if DROPOUT:
        seed = gl.load(SEED)
        k1 = _mix(o_rows.to(gl.uint32) ^ seed.to(gl.uint32))
        rkeys = _mix(k1 ^ (o_rows >> 32).to(gl.uint32) ^ (seed >> 32).to(gl.uint32))
    else:
        rkeys = rows
    m_i = gl.full([64], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([64], gl.float32, layout=gl.SliceLayout(1, s_layout))
    acc = gl.zeros([64, HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([64, BLOCK_N], gl.float32, layout=s_layout)
    q = q_smem.index(G)

    mbarrier.wait(q_bar, 0)
    mbarrier.wait(ready.index(0), 0)
    _my_turn(turn, 0, G, PINGPONG)
    s = warpgroup_mma(q, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    _your_turn(turn, G, PINGPONG)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
    p, alpha, m_i, l_i = _softmax_step(s, 0, m_i, l_i, rows, rkeys, qk_scale, T, drop_thr, n_full, BLOCK_N, s_layout,
                                       DROPOUT)
    for j in range(1, n_tiles):
        mbarrier.wait(ready.index(j % STAGES), (j // STAGES) & 1)
        _my_turn(turn, j, G, PINGPONG)
        s = warpgroup_mma(q, k_smem.index(j % STAGES).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_smem.index((j - 1) % STAGES), acc,
                            is_async=True)
        _your_turn(turn, G, PINGPONG)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s, ))
        p, alpha, m_i, l_i = _softmax_step(s, j, m_i, l_i, rows, rkeys, qk_scale, T, drop_thr, n_full, BLOCK_N,
                                           s_layout, DROPOUT)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(empty.index((j - 1) % STAGES), count=1)
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    _my_turn(turn, n_tiles, G, PINGPONG)
    acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_smem.index((n_tiles - 1) % STAGES), acc,
                        is_async=True)
    _your_turn(turn, G, PINGPONG)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))

    acc = acc * gl.convert_layout(keep_scale / l_i, gl.SliceLayout(1, o_layout))[:, None]
    o_r = row0 + gl.arange(0, 64, layout=gl.SliceLayout(1, o_layout))
    o_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    o_ptrs = O + ((b.to(gl.int64) * T + o_r) * H + h)[:, None] * HEAD_DIM + o_d[None, :]  # O: (B, T, H, D)
    gl.store(o_ptrs, acc.to(dtype), mask=(o_r < T)[:, None])
    gl.store(LSE + o_rows, m_i + gl.log2(l_i), mask=rows < T)


@gluon.jit
def _fwd_kernel(q_desc, k_desc, v_desc, O, LSE, SEED, drop_thr, keep_scale, qk_scale, H, T,
                q_rb, q_rh, q_ch, k_rb, k_rh, k_ch, v_rb, v_rh, v_ch,
                HEAD_DIM: gl.constexpr, GROUPS: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                DROPOUT: gl.constexpr, PINGPONG: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                num_warps: gl.constexpr):
    """A program: GROUPS warp groups of 64 query rows each (the first in the default partition,
    the second a worker) and one producer warp, sharing the key/value ring."""
    BLOCK_M: gl.constexpr = 64 * GROUPS
    start_m = (gl.num_programs(0) - 1 - gl.program_id(0)) * BLOCK_M  # heaviest (last) query tiles first
    bh = gl.program_id(1)
    b = bh // H
    h = bh % H
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [GROUPS, 64, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=GROUPS)
    for g in gl.static_range(2):
        mbarrier.init(turn.index(g), count=1)
    pp: gl.constexpr = PINGPONG and GROUPS == 2
    if pp:
        mbarrier.arrive(turn.index(0), count=1)  # group 0 has the first turn
    fence_async_shared()
    # causal: key tiles [0, n_tiles) hold every key the program's last query sees
    n_tiles = gl.cdiv(gl.minimum(start_m + BLOCK_M, T), BLOCK_N)
    # a tensor's rows as TMA sees them: row (b, h, t) = b*rb + h*rh + t, its head's columns from h*ch
    q_row = b * q_rb + h * q_rh + start_m
    k_row = b * k_rb + h * k_rh
    v_row = b * v_rb + h * v_rh
    if GROUPS == 2:
        gl.warp_specialize([
            (_consumer, (q_smem, k_smem, v_smem, q_bar, ready, empty, turn, O, LSE, SEED, drop_thr, keep_scale, qk_scale, T,
                         H, b, h, bh, start_m, n_tiles, 0, HEAD_DIM, BLOCK_N, STAGES, DROPOUT, pp)),
            (_consumer, (q_smem, k_smem, v_smem, q_bar, ready, empty, turn, O, LSE, SEED, drop_thr, keep_scale, qk_scale, T,
                         H, b, h, bh, start_m, n_tiles, 1, HEAD_DIM, BLOCK_N, STAGES, DROPOUT, pp)),
            (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, q_row, k_row, v_row,
                         h * q_ch, h * k_ch, h * v_ch, n_tiles, GROUPS, BLOCK_N, STAGES)),
        ], [4, 1], [CONSUMER_REGS, 24])
    else:
        gl.warp_specialize([
            (_consumer, (q_smem, k_smem, v_smem, q_bar, ready, empty, turn, O, LSE, SEED, drop_thr, keep_scale, qk_scale, T,
                         H, b, h, bh, start_m, n_tiles, 0, HEAD_DIM, BLOCK_N, STAGES, DROPOUT, pp)),
            (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, q_row, k_row, v_row,
                         h * q_ch, h * k_ch, h * v_ch, n_tiles, GROUPS, BLOCK_N, STAGES)),
        ], [1], [24])


# (GROUPS, BLOCK_N, STAGES) per head dim: warp groups of 64 query rows a program, the key tile
CONFIGS = {64: (2, 128, 3), 128: (2, 64, 3)}


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
    groups, bn, stages, pingpong = (config or CONFIGS[D]) + (True, ) * (len(config or CONFIGS[D]) == 3)
    el = gl.bfloat16 if q.dtype == torch.bfloat16 else gl.float16
    descs, coords = [], []
    bm = 64 * groups
    for x, block in ((q, 64), (k, bn), (v, bn)):
        rb, rh, ch, stride, n_rows, n_cols = _rows(x, T, D)
        layout = gl.NVMMASharedLayout.get_default_for([block, D], el)
        descs.append(TensorDescriptor(x, [n_rows, n_cols], [stride, 1], [block, D], layout))
        coords += [rb, rh, ch]
    grid = (triton.cdiv(T, bm), B * H)
    _fwd_kernel[grid](*descs, o, lse, lse if seed is None else seed, drop_thr, 1.0 / (1.0 - p_drop), sm_scale_log2,
                      H, T, *coords, HEAD_DIM=D, GROUPS=groups, BLOCK_N=bn, STAGES=stages, DROPOUT=seed is not None,
                      PINGPONG=pingpong, CONSUMER_REGS=232, num_warps=4)
    return o, lse
