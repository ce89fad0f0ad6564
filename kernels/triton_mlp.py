"""The MLP's GELU inside its matmuls, one Triton kernel each way:

    forward    pre = x W_fc^T (+ b_fc),  act = GELU(pre)          one kernel writes both
               y = act W_proj^T (+ b_proj)                         cuBLAS
    backward   d_act = dy W_proj,  d_pre = d_act * GELU'(pre)     one kernel
               dW_proj = dy^T act, dW_fc = d_pre^T x, dx = d_pre W_fc   cuBLAS

Unfused, GELU forward and backward are elementwise passes over the (tokens x 4C) activations: at
the seed's training shape (16,384 x 1,536, bf16) 36 and 48 µs per layer on the H200, each nearly
the matmul beside it. Here they are the epilogue of the matmul that makes their input, so the
activations are written once and read once less. The matmul is persistent (two programs an SM
walking the output tiles) and loads and stores through TMA descriptors. On the H200 the pair still
loses to cuBLAS + the eager pass: 77.9 against 72.8 us forward, 99.5 against 86.2 backward, the
whole MLP forward and backward 336 against 315 us (16,384 x 384, bf16, graphed): the epilogue
(two stores, or a load and a store) is not hidden behind the next tile's products the way
cuBLAS's warp-specialized kernels hide theirs, and the matmul alone, one store, matches cuBLAS
(39.8 against 39.5 us at one program an SM). A descriptor needs its rows 16-byte aligned: n_embd a
multiple of 8 (GPT.check says so before any work). GELU is the exact (erf) form nn.GELU computes,
erf from a rational form good to 1.5e-7, applied to the fp32 accumulator before the rounding to
bf16 that an unfused pass reads back.
"""
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable
from triton.tools.tensor_descriptor import TensorDescriptor

from . import triton_key  # noqa: F401 -- a fresh process reads Triton's cache key, not re-hashes it

SQRT1_2 = tl.constexpr(0.7071067811865476)  # 1 / sqrt(2)
INV_SQRT_2PI = tl.constexpr(0.3989422804014327)  # 1 / sqrt(2 pi)
# erf(z) = 1 - t (A1 + t (A2 + t (A3 + t (A4 + t A5)))) exp(-z^2), t = 1 / (1 + P z), z >= 0: the
# rational form of Abramowitz and Stegun 7.1.26, |error| <= 1.5e-7. It shares exp(-z^2) with
# GELU's derivative (z = u / sqrt 2: exp(-u^2 / 2)), at ~15 instructions against libdevice's erf,
# whose branches a warp runs both of. Measured in the forward kernel at 128 x 256 tiles, one program
# an SM (H200): 89.6 us with libdevice's (h200-2026-12-02j), 86.5 with this one -- a small part of
# what the epilogue costs
P, A1, A2, A3, A4, A5 = (tl.constexpr(v) for v in (0.3275911, 0.254829592, -0.284496736, 1.421413741,
                                                   -1.453152027, 1.061405429))


@triton.jit
def _gelu_parts(u):
    """(Phi(u), exp(-u^2 / 2)): GELU(u) = u Phi(u), GELU'(u) = Phi(u) + u exp(-u^2 / 2) / sqrt(2 pi)."""
    e = tl.exp(-0.5 * u * u)
    t = 1.0 / (1.0 + P * tl.abs(u) * SQRT1_2)
    erf_abs = 1.0 - t * (A1 + t * (A2 + t * (A3 + t * (A4 + t * A5)))) * e
    return 0.5 + 0.5 * tl.where(u >= 0, erf_abs, -erf_abs), e


@triton.jit(do_not_specialize=["M"])  # a launch at any token count finds the same kernel
def _fc_gelu_kernel(A, B, BIAS, PRE, OUT, M, N, K, PROGRAMS,
                    HAS_BIAS: tl.constexpr, BACKWARD: tl.constexpr, PRECISION: tl.constexpr,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    """acc = A[M, K] B^T in fp32 over (BM, BN) output tiles, tile pid, pid + PROGRAMS, ... (two
    programs an SM: one's epilogue overlaps the other's products). A, B, PRE, OUT are TMA
    descriptors: the edges load as zeros and store clipped, so no shape need be a tile multiple.
    Forward: B is W_fc (N, K) as stored; PRE = acc (+ bias), OUT = GELU(PRE). Backward: B is W_proj
    (K, N) as stored, read untransposed; OUT = acc * GELU'(PRE), PRE's tile loaded before the
    products so that its trip to memory overlaps them. fp32 inputs multiply in IEEE fp32,
    PyTorch's default for fp32 matmuls (PRECISION; bf16 ignores it)."""
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, PROGRAMS, flatten=True):
        # grouped order: GROUP_M row tiles share each B column tile while it is in L2
        group = tile // (GROUP_M * tiles_n)
        first_m = group * GROUP_M
        rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
        m0 = (first_m + (tile % (GROUP_M * tiles_n)) % rows_in_group) * BM
        n0 = (tile % (GROUP_M * tiles_n)) // rows_in_group * BN
        if BACKWARD:
            pre = PRE.load([m0, n0]).to(tl.float32)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = A.load([m0, k])
            if BACKWARD:
                acc = tl.dot(a, B.load([k, n0]), acc, input_precision=PRECISION)
            else:
                acc = tl.dot(a, B.load([n0, k]).T, acc, input_precision=PRECISION)
        if BACKWARD:
            cdf, e = _gelu_parts(pre)
            OUT.store([m0, n0], (acc * (cdf + pre * e * INV_SQRT_2PI)).to(OUT.dtype))
        else:
            if HAS_BIAS:
                acc += tl.load(BIAS + n0 + tl.arange(0, BN), mask=n0 + tl.arange(0, BN) < N, other=0.0
                               ).to(tl.float32)[None, :]
            PRE.store([m0, n0], acc.to(PRE.dtype))
            cdf, _ = _gelu_parts(acc)
            OUT.store([m0, n0], (acc * cdf).to(OUT.dtype))


def tiles(device, dtype=torch.bfloat16, backward: bool = False) -> dict:
    """Fixed tiles, not an autotune on the start-up clock. A GPU, 16-bit inputs: 128 x 128 x 64
    on 8 warps, 2 stages forward; 64 x 128 x 64 on 4 warps, 3 stages backward (whose PRE tile
    takes shared memory too): each small enough for two programs an SM (_programs), so that one's
    epilogue runs while the other multiplies. On the H200 at 16,384 x 1,536 x 384, bf16, graphed:
    77.9 and 99.5 us, against 85.8 and 109.3 for the best tiles at one program an SM and 81.3 and
    114.2 at one program a tile (experiments/results/h200-2026-12-04c). fp32, twice the bytes a
    chunk: 128 x 128 in 32-deep chunks, 3 stages. The interpreter: small tiles, one stage."""
    if device.type != "cuda":
        return dict(BM=16, BN=16, BK=16, GROUP_M=4, num_warps=1, num_stages=1)
    if dtype == torch.float32:
        return dict(BM=128, BN=128, BK=32, GROUP_M=8, num_warps=8, num_stages=3)
    if backward:
        return dict(BM=64, BN=128, BK=64, GROUP_M=8, num_warps=4, num_stages=3)
    return dict(BM=128, BN=128, BK=64, GROUP_M=8, num_warps=8, num_stages=2)


PROGRAMS_PER_SM = 2  # the tiles above fit two an SM in shared memory (sm_90 compile: 98 and 107 KB)


def _programs(device, tiles_total: int) -> int:
    if device.type != "cuda":
        return min(tiles_total, 3)  # a few programs, several tiles each: the loop runs as on a GPU
    return min(tiles_total, PROGRAMS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count)


def _launch(a, b, bias, pre, out, backward: bool):
    """a (M, K); b W_fc (N, K) forward, W_proj (K, N) backward, both as stored."""
    M, K = a.shape
    N = out.shape[1]
    t = tiles(a.device, a.dtype, backward)
    warps, stages = t.pop("num_warps"), t.pop("num_stages")
    BM, BN, BK = t["BM"], t["BN"], t["BK"]
    n_tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    progs = _programs(a.device, n_tiles)
    desc = TensorDescriptor.from_tensor
    _fc_gelu_kernel[(progs,)](desc(a, [BM, BK]), desc(b, [BK, BN] if backward else [BN, BK]),
                              bias if bias is not None else out, desc(pre, [BM, BN]), desc(out, [BM, BN]), M, N, K,
                              progs, HAS_BIAS=bias is not None, BACKWARD=backward,
                              PRECISION="ieee" if a.dtype == torch.float32 else "tf32", num_warps=warps,
                              num_stages=stages, **t)


def warmups(C: int, bias: bool, dtype, device) -> list:
    """Zero-argument calls launching this MLP's two kernels (forward, backward) at width C in
    `dtype` on 16 tokens of zeros, as kernels/triton_norm.py's warmups do for the norm."""
    def rows(n, m):
        return torch.zeros(n, m, dtype=dtype, device=device)

    b_fc = torch.zeros(4 * C, device=device) if bias else None
    wf, wp = rows(4 * C, C), rows(C, 4 * C)
    return [lambda: _launch(rows(16, C), wf, b_fc, rows(16, 4 * C), rows(16, 4 * C), False),
            lambda: _launch(rows(16, C), wp, None, rows(16, 4 * C), rows(16, 4 * C), True)]


def _compute_dtype(x) -> torch.dtype:
    dev = x.device.type
    return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else x.dtype


class FusedMLPFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w_fc, b_fc, w_proj, b_proj):
        dtype = _compute_dtype(x)
        C, H = w_fc.shape[1], w_fc.shape[0]
        x2 = x.reshape(-1, C).to(dtype).contiguous()
        wf, wp = w_fc.to(dtype).contiguous(), w_proj.to(dtype).contiguous()
        pre = torch.empty((x2.shape[0], H), dtype=dtype, device=x.device)
        act = torch.empty_like(pre)
        _launch(x2, wf, b_fc, pre, act, backward=False)
        with torch.autocast(x.device.type, enabled=False):
            y = F.linear(act, wp, b_proj.to(dtype) if b_proj is not None else None)
        ctx.save_for_backward(x2, wf, wp, pre, act)
        ctx.meta = (x.shape, x.dtype, w_fc.dtype, b_fc is not None, b_proj is not None)
        return y.view(*x.shape[:-1], w_proj.shape[0])

    @staticmethod
    @once_differentiable  # the backward's kernel has no backward of its own
    def backward(ctx, dy):
        x2, wf, wp, pre, act = ctx.saved_tensors
        shape, x_dtype, w_dtype, has_bf, has_bp = ctx.meta
        dy2 = dy.reshape(-1, wp.shape[0]).to(wf.dtype).contiguous()
        d_pre = torch.empty_like(pre)
        _launch(dy2, wp, None, pre, d_pre, backward=True)  # d_act = dy W_proj, W_proj (K, N) as stored
        with torch.autocast(dy.device.type, enabled=False):
            dw_proj = dy2.t() @ act
            dw_fc = d_pre.t() @ x2
            dx = d_pre @ wf
        db_fc = d_pre.sum(0, dtype=torch.float32).to(w_dtype) if has_bf else None
        db_proj = dy2.sum(0, dtype=torch.float32).to(w_dtype) if has_bp else None
        return dx.view(shape).to(x_dtype), dw_fc.to(w_dtype), db_fc, dw_proj.to(w_dtype), db_proj


def fused_mlp(x, fc: torch.nn.Linear, proj: torch.nn.Linear):
    """proj(GELU(fc(x))), GELU in the matmul kernels' epilogues (forward and backward)."""
    return FusedMLPFn.apply(x, fc.weight, fc.bias, proj.weight, proj.bias)
