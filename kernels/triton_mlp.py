"""The MLP's GELU inside its matmuls, one Triton kernel each way:

    forward    pre = x W_fc^T (+ b_fc),  act = GELU(pre)          one kernel writes both
               y = act W_proj^T (+ b_proj)                         cuBLAS
    backward   d_act = dy W_proj,  d_pre = d_act * GELU'(pre)     one kernel
               dW_proj = dy^T act, dW_fc = d_pre^T x, dx = d_pre W_fc   cuBLAS

Unfused, GELU forward and backward are elementwise passes over the (tokens x 4C) activations: at
the seed's training shape (16,384 x 1,536, bf16) 36 and 48 µs per layer on the H200, each more
than the matmul beside it. Here they are the epilogue of the matmul that makes their input, so the
activations are written once and read once less. GELU is the exact (erf) form nn.GELU computes;
the epilogue applies it to the fp32 accumulator, before the rounding to bf16 that an unfused pass
reads back, so it differs from PyTorch's by that rounding. Offsets are int32: up to 2^31
elements an activation (466k tokens at 4 x 1152 wide).
"""
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from . import triton_key  # noqa: F401 -- a fresh process reads Triton's cache key, not re-hashes it

SQRT1_2 = tl.constexpr(0.7071067811865476)  # 1 / sqrt(2)
INV_SQRT_2PI = tl.constexpr(0.3989422804014327)  # 1 / sqrt(2 pi)


@triton.jit(do_not_specialize=["M"])  # a launch at any token count finds the same kernel
def _fc_gelu_kernel(A, B, BIAS, PRE, OUT, M, N, K, stride_am, stride_bn, stride_bk,
                    HAS_BIAS: tl.constexpr, BACKWARD: tl.constexpr, PRECISION: tl.constexpr,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    """acc = A[M, K] B[N, K]^T in fp32 (B through strides: a weight as stored, or transposed); fp32
    inputs multiply in IEEE fp32, PyTorch's default for fp32 matmuls (PRECISION; bf16 ignores it).
    Forward: PRE = acc (+ bias), OUT = GELU(PRE). Backward: OUT = acc * GELU'(PRE)."""
    pid = tl.program_id(0)
    # grouped order: GROUP_M row tiles share each B column tile while it is in L2
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * tiles_n)) % rows_in_group
    pid_n = (pid % (GROUP_M * tiles_n)) // rows_in_group
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = A + rm[:, None] * stride_am + rk[None, :]
    b_ptrs = B + rn[None, :] * stride_bn + rk[:, None] * stride_bk
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] + k < K), other=0.0)
        b = tl.load(b_ptrs, mask=(rn[None, :] < N) & (rk[:, None] + k < K), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BK
        b_ptrs += BK * stride_bk
    out_mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * N + rn[None, :]
    if BACKWARD:
        pre = tl.load(PRE + offs, mask=out_mask, other=0.0).to(tl.float32)
        cdf = 0.5 * (1.0 + tl.math.erf(pre * SQRT1_2))
        d_gelu = cdf + pre * tl.exp(-0.5 * pre * pre) * INV_SQRT_2PI
        tl.store(OUT + offs, (acc * d_gelu).to(OUT.dtype.element_ty), mask=out_mask)
    else:
        if HAS_BIAS:
            acc += tl.load(BIAS + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
        tl.store(PRE + offs, acc.to(PRE.dtype.element_ty), mask=out_mask)
        act = 0.5 * acc * (1.0 + tl.math.erf(acc * SQRT1_2))
        tl.store(OUT + offs, act.to(OUT.dtype.element_ty), mask=out_mask)


def tiles(device, backward: bool = False) -> dict:
    """Fixed tiles, not an autotune on the start-up clock. A GPU: 64-row output tiles, 4 warps, 3
    stages, 128 columns forward and 64 backward (the fastest of 16 choices each way on the H200 at
    16,384 x 1,536 x 384). The interpreter: small tiles, one stage."""
    if device.type != "cuda":
        return dict(BM=16, BN=16, BK=16, GROUP_M=4, num_warps=1, num_stages=1)
    return dict(BM=64, BN=64 if backward else 128, BK=64, GROUP_M=8, num_warps=4, num_stages=3)


def _launch(a, b, stride_bn, stride_bk, bias, pre, out, backward: bool):
    M, K = a.shape
    N = out.shape[1]
    t = tiles(a.device, backward)
    warps, stages = t.pop("num_warps"), t.pop("num_stages")
    grid = (triton.cdiv(M, t["BM"]) * triton.cdiv(N, t["BN"]),)
    _fc_gelu_kernel[grid](a, b, bias if bias is not None else out, pre, out, M, N, K, a.stride(0),
                          stride_bn, stride_bk, HAS_BIAS=bias is not None, BACKWARD=backward,
                          PRECISION="ieee" if a.dtype == torch.float32 else "tf32", num_warps=warps,
                          num_stages=stages, **t)


def warmups(C: int, bias: bool, dtype, device) -> list:
    """Zero-argument calls launching this MLP's two kernels (forward, backward) at width C in
    `dtype` on 16 tokens of zeros, as kernels/triton_norm.py's warmups do for the norm."""
    def rows(n, m):
        return torch.zeros(n, m, dtype=dtype, device=device)

    b_fc = torch.zeros(4 * C, device=device) if bias else None
    wf, wp = rows(4 * C, C), rows(C, 4 * C)
    return [lambda: _launch(rows(16, C), wf, wf.stride(0), 1, b_fc, rows(16, 4 * C), rows(16, 4 * C), False),
            lambda: _launch(rows(16, C), wp, 1, wp.stride(0), None, rows(16, 4 * C), rows(16, 4 * C), True)]


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
        _launch(x2, wf, wf.stride(0), 1, b_fc, pre, act, backward=False)
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
        # d_act = dy W_proj: B[n, k] = W_proj[k, n], a transposed read of the weight as stored
        _launch(dy2, wp, 1, wp.stride(0), None, pre, d_pre, backward=True)
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
