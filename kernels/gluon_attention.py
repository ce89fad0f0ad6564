"""A Hopper (sm_90) forward for the Triton attention (kernels/triton_attention.py), in Gluon: Triton's
lower-level language, where layouts, shared memory, TMA copies and asynchronous warp-group MMAs are
explicit. attention.forward=gluon selects it; the backward stays the tl kernel's.

Why: Triton's compiler waits on each tl.dot right after issuing it, so in the tl forward a warp
group's tensor cores idle while it does the softmax (sm_90 TTGIR of
kernels/triton_attention_kernels.py: every warp_group_dot_wait has pendings = 0). Here a program
(one warp group, 64 query rows) issues key tile j's scores S_j = Q K_j^T and tile j-1's P V back to
back and waits only for S_j, so tile j's softmax runs while P_{j-1} V_{j-1} is on the tensor cores:

    S_j = Q K_j^T, O += P_{j-1} V_{j-1}   (both async)
    wait for S_j; softmax(S_j) -> P_j, alpha_j   (the P V still running)
    wait for the P V; O *= alpha_j; refill tile j-1's buffers

Key/value tiles stream through a ring of STAGES shared-memory buffers filled by TMA, one mbarrier
each. Several programs share an SM, so one's MMAs also run under another's softmax. Same contract
as the tl forward: O in (B, T, H, D) memory order, the base-2 log-sum-exp per row (B*H, T),
bottom-right causal, the dropout mask of kernels/triton_dropout.py (the same hash, so the tl
backward regenerates it). It takes causal self-attention (Tq = Tk) in bf16/fp16 at head dim 64
or 128 on sm_90, in a layout TMA can address (unsupported() says why not; such calls run the tl forward).
"""
import functools

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# the dropout hash of the tl kernels, called as they are: the tl backward regenerates this mask
from .triton_dropout import kept, load_seed, row_keys

# TMA's global -> shared copy: async_load from Triton 3.7 on, async_copy_global_to_shared before
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared


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
        p = gl.where(kept(rkeys[:, None], cols[None, :], drop_thr), p, 0.0)
    return p, alpha, m_new, l_i


@gluon.jit
def _load_kv(k_desc, v_desc, k_smem, v_smem, bars, t, k_row, v_row, k_col, v_col,
             BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """TMA copies of key/value tile t into ring buffer t % STAGES (one mbarrier for both)."""
    s = t % STAGES
    bar = bars.index(s)
    mbarrier.expect(bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    _tma_load(k_desc, [k_row + t * BLOCK_N, k_col], bar, k_smem.index(s))
    _tma_load(v_desc, [v_row + t * BLOCK_N, v_col], bar, v_smem.index(s))


@gluon.jit
def _fwd_kernel(q_desc, k_desc, v_desc, O, LSE, SEED, drop_thr, keep_scale, qk_scale, H, T,
                q_rb, q_rh, q_ch, k_rb, k_rh, k_ch, v_rb, v_rh, v_ch,
                HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, DROPOUT: gl.constexpr):
    # tile j-1's buffers are refilled in iteration j, after the wait for tile j at its top: with
    # fewer than three buffers that wait would come before the refill it waits on
    gl.static_assert(STAGES >= 3)
    BLOCK_M: gl.constexpr = 64  # one warp group's rows: a wgmma is 64 rows tall
    start_m = (gl.num_programs(0) - 1 - gl.program_id(0)) * BLOCK_M  # heaviest (last) query tiles first
    bh = gl.program_id(1)
    b = bh // H
    h = bh % H
    # a tensor's rows as TMA sees them: row (b, h, t) = b*rb + h*rh + t, its head's columns from h*ch
    k_row = b * k_rb + h * k_rh
    v_row = b * v_rb + h * v_rh
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)
    fence_async_shared()

    # causal: key tiles [0, n_tiles) hold keys <= the tile's last query; below n_full all are visible
    n_tiles = gl.cdiv(gl.minimum(start_m + BLOCK_M, T), BLOCK_N)
    n_full = gl.minimum((start_m + 1) // BLOCK_N, T // BLOCK_N)
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    _tma_load(q_desc, [b * q_rb + h * q_rh + start_m, h * q_ch], q_bar, q_smem)
    for t in gl.static_range(STAGES):
        if t < n_tiles:
            _load_kv(k_desc, v_desc, k_smem, v_smem, bars, t, k_row, v_row, h * k_ch, h * v_ch, BLOCK_N, STAGES)

    rows = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    o_rows = bh.to(gl.int64) * T + rows  # the dropout hash's row index and the LSE's
    rkeys = row_keys(load_seed(SEED, DROPOUT), o_rows, DROPOUT)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BLOCK_M], gl.float32, layout=gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)

    mbarrier.wait(q_bar, 0)
    mbarrier.wait(bars.index(0), 0)
    s = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
    p, alpha, m_i, l_i = _softmax_step(s, 0, m_i, l_i, rows, rkeys, qk_scale, T, drop_thr, n_full, BLOCK_N, s_layout,
                                       DROPOUT)
    for j in range(1, n_tiles):
        mbarrier.wait(bars.index(j % STAGES), (j // STAGES) & 1)
        s = warpgroup_mma(q_smem, k_smem.index(j % STAGES).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_smem.index((j - 1) % STAGES), acc,
                            is_async=True)
        # S_j first, then the P V: waiting down to one in flight leaves only the P V running while
        # the softmax reads S_j (nothing may read a running MMA's registers, or ptxas serialises
        # every MMA of the loop: its C7514 warning)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s, ))
        p, alpha, m_i, l_i = _softmax_step(s, j, m_i, l_i, rows, rkeys, qk_scale, T, drop_thr, n_full, BLOCK_N,
                                           s_layout, DROPOUT)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        if j - 1 + STAGES < n_tiles:  # tile j-1's buffers are free again
            _load_kv(k_desc, v_desc, k_smem, v_smem, bars, j - 1 + STAGES, k_row, v_row, h * k_ch, h * v_ch,
                     BLOCK_N, STAGES)
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_smem.index((n_tiles - 1) % STAGES), acc,
                        is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    mbarrier.invalidate(q_bar)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))

    acc = acc * gl.convert_layout(keep_scale / l_i, gl.SliceLayout(1, o_layout))[:, None]  # keep = 1 / (1 - p)
    o_r = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, o_layout))
    o_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    o_ptrs = O + ((b.to(gl.int64) * T + o_r) * H + h)[:, None] * HEAD_DIM + o_d[None, :]  # O: (B, T, H, D)
    gl.store(o_ptrs, acc.to(dtype), mask=(o_r < T)[:, None])
    gl.store(LSE + o_rows, m_i + gl.log2(l_i), mask=rows < T)


# (BLOCK_N, STAGES) per head dim. On the H200 (bf16, B 64, H 6, T 256-2048; experiments/results/
# h200-2026-12-04d): 64-key tiles beat 128 (fewer registers: two or three programs an SM), three
# buffers beat four, and one warp group a program beat two sharing the ring (their TMA refills
# synchronise the whole program every tile), with or without a producer warp and turns
CONFIGS = {64: (64, 3), 128: (64, 3)}


def _rows(t, T, D):
    """How TMA addresses (B, H, T, D) tensor t as a 2-D (rows, columns) view: (rb, rh, ch, row
    stride, rows, columns) with row (b, h, t) = b*rb + h*rh + t and head h's columns from h*ch;
    None where its strides allow no such view (TMA also needs 16-byte aligned rows)."""
    B, H = t.shape[:2]
    sb, sh, st, sd = t.stride()
    if sd != 1 or (st * t.element_size()) % 16 or t.data_ptr() % 16:
        return None
    if sh == D and sb == T * st and st >= H * D:  # heads side by side in a row: (B, T, [3,] H, D), the model's qkv
        return T, 0, D, st, B * T, H * D
    if sh == T * st and sb == H * sh and st >= D:  # (B, H, T, D)-like
        return H * T, T, 0, st, B * H * T, D
    return None


def plan(q, k, v, causal):
    """(why not, None) where this forward cannot take the call, else (None, the TMA views of q,
    k and v from _rows), so a call works them out once."""
    if not (q.is_cuda and torch.cuda.get_device_capability(q.device)[0] == 9):
        return "it needs a Hopper GPU (sm_90: TMA and warp-group MMAs)", None
    if q.dtype not in (torch.bfloat16, torch.float16):
        return f"it runs bf16 or fp16, not {q.dtype}", None
    if not causal or q.shape != k.shape or k.shape != v.shape:
        return "it takes causal self-attention only (as many queries as keys)", None
    T, D = q.shape[2], q.shape[3]
    if D not in CONFIGS:
        return f"it takes head dim {' or '.join(map(str, CONFIGS))}, not {D}", None
    views = [_rows(x, T, D) for x in (q, k, v)]
    if any(view is None for view in views):
        return "q, k and v need unit-stride rows TMA can address (16-byte aligned)", None
    return None, views


def unsupported(q, k, v, causal) -> str | None:
    """Why this forward cannot take the call, in a phrase (None: it can)."""
    return plan(q, k, v, causal)[0]


@functools.cache
def _smem_layout(block, D, el):
    """The shared-memory layout of a (block, D) TMA tile: the same for every call of a shape."""
    return gl.NVMMASharedLayout.get_default_for([block, D], el)


def forward(q, k, v, o, lse, sm_scale_log2, p_drop, drop_thr, seed, views, config=None):
    """O (a (B, H, T, D) view of (B, T, H, D) memory) and LSE ((B*H, T) fp32) for causal q, k, v
    with the TMA views plan() found; config: (BLOCK_N, STAGES) in place of CONFIGS's."""
    B, H, T, D = q.shape
    bn, stages = config or CONFIGS[D]
    el = gl.bfloat16 if q.dtype == torch.bfloat16 else gl.float16
    descs, coords = [], []
    for x, block, (rb, rh, ch, stride, n_rows, n_cols) in zip((q, k, v), (64, bn, bn), views):
        descs.append(TensorDescriptor(x, [n_rows, n_cols], [stride, 1], [block, D], _smem_layout(block, D, el)))
        coords += [rb, rh, ch]
    _fwd_kernel[(triton.cdiv(T, 64), B * H)](*descs, o, lse, lse if seed is None else seed, drop_thr,
                                             1.0 / (1.0 - p_drop), sm_scale_log2, H, T, *coords, HEAD_DIM=D,
                                             BLOCK_N=bn, STAGES=stages, DROPOUT=seed is not None, num_warps=4)
    return o, lse
