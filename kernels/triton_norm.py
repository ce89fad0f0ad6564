"""The residual add, its dropout and the next LayerNorm as one Triton kernel each way:

    h = x + dropout(branch)          (the residual stream, fp32 under autocast)
    y = LayerNorm(h) * w (+ b)       (written in the dtype the next matmul reads: bf16 under autocast)

Unfused, a pre-LN GPT runs dropout, add and LayerNorm as separate kernels forward and the same
again backward, where PyTorch's LayerNorm weight gradient (GammaBetaBackward) alone took 78 µs
per call on the H200 at 16,384 x 384, several times its bandwidth time. Here the backward is one
pass over the rows: dh = dh_in + LayerNorm'(dy), d branch = dropout mask * dh, and each program
adds dy * x_hat over its rows into one row of partial sums; a (programs x C) sum finishes dw
(_column_sums: ~100 programs, each adding its block's sums into dw).

Dropout's keep decision for element (row, col) is the attention kernels' hash of (seed, row,
col) (kernels/triton_dropout.py), so the backward regenerates the mask and nothing is stored;
the seed is a device tensor drawn per call, so a CUDA-graphed step draws new masks every replay.
"""
import torch
import triton
import triton.language as tl

from . import triton_key  # noqa: F401 -- a fresh process reads Triton's cache key, not re-hashes it
from .triton_dropout import kept, row_keys, threshold

ROWS = 4  # forward: rows per program, a ROWS x next_pow2(C) tile
# backward: rows per tile, tiles per program (a loop), warps per program. Two-row tiles on two
# warps, four per program: the kernel alone at 16,384 x 384 took 31.5 us against 50 us for
# four-row tiles on four warps (experiments/results/h200-2026-12-01b/logs/call8_bwd_tile_profile.txt),
# and against 56 us for two programs an SM looping over all their rows, too few bytes in flight
BWD_ROWS, BWD_TILES, BWD_WARPS = 2, 4, 2
# the backward's dw (and db): each program's column sums added into one zeroed row by fp32 atomics
# (true), or written as a (programs x C) partial that _column_sums finishes in a second launch
BWD_ATOMIC_DW = False


@triton.jit(do_not_specialize=["n_rows"])  # a launch at any row count finds the same kernel
def _add_norm_fwd(X, BR, H, Y, W, B, MEAN, RSTD, SEED, drop_thr, drop_scale, n_rows, C, eps,
                  HAS_RES: tl.constexpr, HAS_BIAS: tl.constexpr, DROPOUT: tl.constexpr,
                  ROWS: tl.constexpr, BLOCK_C: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_C)
    rmask, cmask = rows < n_rows, cols < C
    mask = rmask[:, None] & cmask[None, :]
    offs = rows.to(tl.int64)[:, None] * C + cols[None, :]
    h = tl.load(BR + offs, mask=mask, other=0.0).to(tl.float32)
    if DROPOUT:
        keys = row_keys(tl.load(SEED), rows.to(tl.int64), True)
        h = tl.where(kept(keys[:, None], cols[None, :], drop_thr), h * drop_scale, 0.0)
    if HAS_RES:
        h += tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(H + offs, h.to(H.dtype.element_ty), mask=mask)
    mean = tl.sum(h, axis=1) / C
    d = tl.where(mask, h - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / C + eps)
    y = d * rstd[:, None] * tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    if HAS_BIAS:
        y += tl.load(B + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)
    tl.store(MEAN + rows, mean, mask=rmask)
    tl.store(RSTD + rows, rstd, mask=rmask)


@triton.jit(do_not_specialize=["n_rows"])
def _add_norm_bwd(DY, DH_IN, H, W, MEAN, RSTD, DX, DBR, DW_PART, DB_PART, SEED, drop_thr, drop_scale,
                  n_rows, C,
                  HAS_DH: tl.constexpr, HAS_RES: tl.constexpr, HAS_BIAS: tl.constexpr, DROPOUT: tl.constexpr,
                  ATOMIC_DW: tl.constexpr, ROWS: tl.constexpr, TILES: tl.constexpr, BLOCK_C: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_C)
    cmask = cols < C
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_C], dtype=tl.float32)
    db = tl.zeros([BLOCK_C], dtype=tl.float32)
    if DROPOUT:
        seed = tl.load(SEED)
    for t in range(TILES):  # a trip count known at compile time: Triton 3.6's interpreter takes no other
        rows = (pid * TILES + t) * ROWS + tl.arange(0, ROWS)
        rmask = rows < n_rows
        mask = rmask[:, None] & cmask[None, :]
        offs = rows.to(tl.int64)[:, None] * C + cols[None, :]
        mean = tl.load(MEAN + rows, mask=rmask, other=0.0)
        rstd = tl.load(RSTD + rows, mask=rmask, other=0.0)
        h = tl.load(H + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
        xhat = tl.where(mask, (h - mean[:, None]) * rstd[:, None], 0.0)
        wdy = dy * w[None, :]
        c1 = tl.sum(xhat * wdy, axis=1) / C
        c2 = tl.sum(wdy, axis=1) / C
        dh = (wdy - (xhat * c1[:, None] + c2[:, None])) * rstd[:, None]
        if HAS_DH:
            dh += tl.load(DH_IN + offs, mask=mask, other=0.0).to(tl.float32)
        if HAS_RES:
            tl.store(DX + offs, dh.to(DX.dtype.element_ty), mask=mask)
        dbr = dh
        if DROPOUT:
            keys = row_keys(seed, rows.to(tl.int64), True)
            dbr = tl.where(kept(keys[:, None], cols[None, :], drop_thr), dh * drop_scale, 0.0)
        tl.store(DBR + offs, dbr.to(DBR.dtype.element_ty), mask=mask)
        dw += tl.sum(dy * xhat, axis=0)
        if HAS_BIAS:
            db += tl.sum(dy, axis=0)
    if ATOMIC_DW:
        tl.atomic_add(DW_PART + cols, dw, mask=cmask, sem="relaxed")
        if HAS_BIAS:
            tl.atomic_add(DB_PART + cols, db, mask=cmask, sem="relaxed")
    else:
        tl.store(DW_PART + pid * C + cols, dw, mask=cmask)
        if HAS_BIAS:
            tl.store(DB_PART + pid * C + cols, db, mask=cmask)


@triton.jit
def _column_sums(PART, OUT, n_rows, C, ROWS: tl.constexpr, BC: tl.constexpr):
    """OUT[c] += the sum of PART[r, c] over this program's ROWS rows (OUT zeroed before): the
    (programs x C) partial sums the backward leaves, finished by ~100 programs at once. torch's
    column sum of the same (2,048 x 384 fp32, 3 MB) took 10.2 us on the H200, several times its
    bandwidth time, once per LayerNorm in every backward."""
    cols = tl.program_id(0) * BC + tl.arange(0, BC)
    rows = tl.program_id(1) * ROWS + tl.arange(0, ROWS)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < C)
    part = tl.load(PART + rows.to(tl.int64)[:, None] * C + cols[None, :], mask=mask, other=0.0)
    tl.atomic_add(OUT + cols, tl.sum(part, axis=0), mask=cols < C)


SUM_ROWS, SUM_COLS = 64, 128  # a program's (rows x columns) of the partial sums: 2,048 x 384 on 96 programs


def _finish(part: torch.Tensor) -> torch.Tensor:
    """The column sums of the backward's (programs x C) fp32 partials."""
    n, C = part.shape
    out = torch.zeros(C, dtype=torch.float32, device=part.device)
    _column_sums[(triton.cdiv(C, SUM_COLS), triton.cdiv(n, SUM_ROWS))](part, out, n, C, ROWS=SUM_ROWS, BC=SUM_COLS)
    return out


def _forward(xr, br, weight, bias, seed, p_drop, eps, out_dtype, stream_dtype):
    """One forward launch on (n, C) rows: xr the residual (None: the stream starts at the branch).
    Returns h, y, mean, rstd."""
    n, C = br.shape
    h = torch.empty((n, C), dtype=stream_dtype, device=br.device)
    y = torch.empty((n, C), dtype=out_dtype, device=br.device)
    mean = torch.empty(n, dtype=torch.float32, device=br.device)
    rstd = torch.empty_like(mean)
    dropout = seed is not None and p_drop > 0
    _add_norm_fwd[(triton.cdiv(n, ROWS),)](
        xr if xr is not None else br, br, h, y, weight, bias if bias is not None else weight, mean, rstd,
        seed if dropout else mean, threshold(p_drop), 1.0 / (1.0 - p_drop), n, C, eps, HAS_RES=xr is not None,
        HAS_BIAS=bias is not None, DROPOUT=dropout, ROWS=ROWS, BLOCK_C=triton.next_power_of_2(C))
    return h, y, mean, rstd


def _backward(dy, dh_in, h, weight, bias, mean, rstd, seed, p_drop, x_dtype, br_dtype):
    """One backward launch: dy the normed output's gradient, dh_in the stream's (None: unused
    downstream), x_dtype the residual's dtype (None: there was none). Returns dx, dbr, dw, db."""
    n, C = h.shape
    dx = torch.empty((n, C), dtype=x_dtype, device=h.device) if x_dtype is not None else None
    dbr = torch.empty((n, C), dtype=br_dtype, device=h.device)
    progs = triton.cdiv(n, BWD_TILES * BWD_ROWS)
    parts = (1, C) if BWD_ATOMIC_DW else (progs, C)
    dw_part = (torch.zeros if BWD_ATOMIC_DW else torch.empty)(parts, dtype=torch.float32, device=h.device)
    db_part = (torch.zeros if BWD_ATOMIC_DW else torch.empty)(parts, dtype=torch.float32, device=h.device) \
        if bias is not None else dw_part
    dropout = seed is not None and p_drop > 0
    _add_norm_bwd[(progs,)](
        dy, dh_in if dh_in is not None else dy, h, weight, mean, rstd, dx if dx is not None else dbr, dbr,
        dw_part, db_part, seed if dropout else mean, threshold(p_drop), 1.0 / (1.0 - p_drop), n, C,
        HAS_DH=dh_in is not None, HAS_RES=dx is not None, HAS_BIAS=bias is not None, DROPOUT=dropout,
        ATOMIC_DW=BWD_ATOMIC_DW, ROWS=BWD_ROWS, TILES=BWD_TILES, BLOCK_C=triton.next_power_of_2(C), num_warps=BWD_WARPS)
    finish = (lambda part: part[0]) if BWD_ATOMIC_DW else _finish
    dw = finish(dw_part).to(weight.dtype)
    db = finish(db_part).to(bias.dtype) if bias is not None else None
    return dx, dbr, dw, db


class AddNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, branch, weight, bias, seed, p_drop, eps, out_dtype, start):
        C = branch.shape[-1]
        br = branch.contiguous().view(-1, C)
        xr = x.contiguous().view(-1, C) if x is not None else None
        h, y, mean, rstd = _forward(xr, br, weight, bias, seed, p_drop, eps, out_dtype, _stream_dtype(x, branch, start))
        ctx.save_for_backward(h, weight, bias, mean, rstd, seed)
        ctx.meta = (x.dtype if x is not None else None, branch.dtype, p_drop)
        ctx.shape = branch.shape
        return h.view(branch.shape), y.view(branch.shape)

    @staticmethod
    def backward(ctx, dh_out, dy):
        h, weight, bias, mean, rstd, seed = ctx.saved_tensors
        x_dtype, br_dtype, p_drop = ctx.meta
        n, C = h.shape
        dh_in = dh_out.contiguous().view(n, C) if dh_out is not None else None
        dx, dbr, dw, db = _backward(dy.contiguous().view(n, C), dh_in, h, weight, bias, mean, rstd, seed, p_drop,
                                    x_dtype, br_dtype)
        dx = dx.view(ctx.shape) if dx is not None else None
        return dx, dbr.view(ctx.shape), dw, db, None, None, None, None, None


def warmups(C: int, bias: bool, p_drop: float, start_dtype, branch_dtype, out_dtype, device,
            backward: bool, stream_dtype=None) -> list:
    """Zero-argument calls, each launching one of the kernels a pre-LN stack of add_norm calls
    runs at width C, on 16 rows of zeros: the first call's forward (no residual, the branch in
    start_dtype: the embedding's), a later one's (the residual stream in stream_dtype -- default
    fp32 --, the branch in branch_dtype), and with `backward` their backward with the stream's gradient and the last
    call's without it. A launch compiles its kernel (or loads it from Triton's cache) once per
    form, so calls made before a job's first step take that off its start-up (run at once in
    threads, they overlap: transformerop/cuda_early.py). Nothing random is drawn."""
    n = 16
    w = torch.ones(C, device=device)
    b = torch.zeros(C, device=device) if bias else None
    seed = torch.zeros(2, dtype=torch.int64, device=device)[:1] if p_drop > 0 else None
    stream = stream_dtype or torch.promote_types(torch.float32, branch_dtype)

    def inputs(start):  # (residual, branch) of the first call (none, the embedding's) or a later one
        rows = torch.zeros(n, C, dtype=start_dtype if start else branch_dtype, device=device)
        return (None if start else torch.zeros(n, C, dtype=stream, device=device)), rows

    def forward(start):
        xr, br = inputs(start)
        _forward(xr, br, w, b, seed, p_drop, 1e-5, out_dtype, _stream_dtype(xr, br, stream_dtype))

    def backward_of(start, has_dh):  # on made-up saved tensors: its forward's kernel is the other calls' work
        xr, br = inputs(start)
        h, stats = torch.zeros(n, C, dtype=_stream_dtype(xr, br, stream_dtype), device=device), \
            torch.zeros(n, device=device)
        _backward(torch.zeros(n, C, dtype=out_dtype, device=device), torch.zeros_like(h) if has_dh else None, h,
                  w, b, stats, stats, seed, p_drop, None if start else stream, br.dtype)

    calls = [lambda: forward(True), lambda: forward(False)]
    if backward:
        calls += [lambda: backward_of(True, True), lambda: backward_of(False, True), lambda: backward_of(False, False)]
    return calls


def _stream_dtype(x, branch, start=None) -> torch.dtype:
    """The residual stream's dtype: x's joined with the branch's (a bf16 branch joins an fp32
    stream); where the stream starts (x None), `start`, or fp32 at least."""
    if x is None and start is not None:
        return start
    return torch.promote_types(x.dtype if x is not None else torch.float32, branch.dtype)


def add_norm(x, branch, norm: torch.nn.LayerNorm, p_drop: float = 0.0, seed=None, out_dtype=None, start=None):
    """(x + dropout(branch), norm(x + dropout(branch))) in one kernel; x None: the stream starts
    at dropout(branch), in dtype `start` (default: fp32 at least). `seed`: a 1-element int64
    device tensor (dropout on when given, p > 0); out_dtype: the normed output's dtype (default:
    the residual's)."""
    if not 0.0 <= p_drop < 1.0:
        raise ValueError(f"add_norm: dropout probability {p_drop} must be in [0, 1)")
    return AddNormFn.apply(x, branch, norm.weight, norm.bias, seed, float(p_drop), float(norm.eps),
                           out_dtype or _stream_dtype(x, branch, start), start)
