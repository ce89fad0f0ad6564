"""The fused MLP's GELU matmuls (kernels/triton_mlp.py) against cuBLAS + PyTorch's GELU, at the
train step's token count (B 64 x T 256) and the three model widths. Each direction:

  forward   pre = x W_fc^T, act = GELU(pre)               reference: F.linear, then F.gelu
  backward  d_pre = (dy W_proj) * GELU'(pre)              reference: F.linear, then aten.gelu_backward

Variants of the fused kernel: "repo" (the project's kernel, tiles given here), "tma" (the same
math with TMA descriptor loads and stores), "tma_p" (tma, persistent: one program an SM looping
over the tiles). Every (variant, tiles) is checked against a float64 reference first, then timed
with triton.testing.do_bench (median and p25-p75, microseconds)."""
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from kernels.triton_mlp import INV_SQRT_2PI, SQRT1_2, _fc_gelu_kernel


@triton.jit
def _tile_of(tile, M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = tile // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (tile % (GROUP_M * tiles_n)) % rows_in_group
    pid_n = (tile % (GROUP_M * tiles_n)) // rows_in_group
    return pid_m * BM, pid_n * BN


@triton.jit
def _tma_tile(a_desc, b_desc, pre_desc, out_desc, off_m, off_n, K, BACKWARD: tl.constexpr,
              B_NK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr):
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, K, BK, num_stages=STAGES):
        a = a_desc.load([off_m, k])
        if B_NK:
            b = tl.trans(b_desc.load([off_n, k]))
        else:
            b = b_desc.load([k, off_n])
        acc = tl.dot(a, b, acc)
    if BACKWARD:
        pre = pre_desc.load([off_m, off_n]).to(tl.float32)
        cdf = 0.5 * (1.0 + tl.math.erf(pre * SQRT1_2))
        d_gelu = cdf + pre * tl.exp(-0.5 * pre * pre) * INV_SQRT_2PI
        out_desc.store([off_m, off_n], (acc * d_gelu).to(out_desc.dtype))
    else:
        pre_desc.store([off_m, off_n], acc.to(pre_desc.dtype))
        act = 0.5 * acc * (1.0 + tl.math.erf(acc * SQRT1_2))
        out_desc.store([off_m, off_n], act.to(out_desc.dtype))


@triton.jit
def _fc_gelu_tma(a_desc, b_desc, pre_desc, out_desc, M, N, K, BACKWARD: tl.constexpr, B_NK: tl.constexpr,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                 STAGES: tl.constexpr):
    off_m, off_n = _tile_of(tl.program_id(0), M, N, BM, BN, GROUP_M)
    _tma_tile(a_desc, b_desc, pre_desc, out_desc, off_m, off_n, K, BACKWARD, B_NK, BM, BN, BK, STAGES)


@triton.jit
def _fc_gelu_tma_p(a_desc, b_desc, pre_desc, out_desc, M, N, K, BACKWARD: tl.constexpr, B_NK: tl.constexpr,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                   STAGES: tl.constexpr):
    n_tiles = tl.cdiv(M, BM) * tl.cdiv(N, BN)
    for tile in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
        off_m, off_n = _tile_of(tile, M, N, BM, BN, GROUP_M)
        _tma_tile(a_desc, b_desc, pre_desc, out_desc, off_m, off_n, K, BACKWARD, B_NK, BM, BN, BK, STAGES)


def gelu64(z):
    return 0.5 * z * (1.0 + torch.erf(z / 2 ** 0.5))


def dgelu64(z):
    return 0.5 * (1.0 + torch.erf(z / 2 ** 0.5)) + z * torch.exp(-0.5 * z * z) / (2 * torch.pi) ** 0.5


def close(got, ref):
    err = (got.double() - ref).abs().max().item()
    return err <= 2e-2 * ref.abs().max().item(), err


def bench(fn):
    med = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
    p25, p75 = triton.testing.do_bench(fn, warmup=5, rep=200, quantiles=[0.25, 0.75])
    return med * 1e3, p25 * 1e3, p75 * 1e3


def main():
    dev = "cuda"
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=dev))
    widths = [int(w) for w in (sys.argv[1] if len(sys.argv) > 1 else "384,768,1152").split(",")]
    M = 64 * 256
    configs = [(64, 128, 64, 4, 3), (64, 64, 64, 4, 3), (128, 128, 64, 4, 3), (128, 128, 64, 8, 3),
               (128, 128, 64, 8, 4), (128, 256, 64, 8, 3), (128, 64, 64, 4, 4), (256, 128, 64, 8, 3),
               (128, 128, 128, 8, 2), (64, 256, 64, 4, 3)]
    torch.manual_seed(0)
    for C in widths:
        N = 4 * C
        x = torch.randn(M, C, device=dev, dtype=torch.bfloat16)
        wf = (torch.randn(N, C, device=dev) / C ** 0.5).to(torch.bfloat16)
        wp = (torch.randn(C, N, device=dev) / N ** 0.5).to(torch.bfloat16)
        dy = torch.randn(M, C, device=dev, dtype=torch.bfloat16)
        pre_ref64 = x.double() @ wf.double().t()
        act_ref64 = gelu64(pre_ref64)
        pre_bf = pre_ref64.to(torch.bfloat16)
        dpre_ref64 = (dy.double() @ wp.double()) * dgelu64(pre_bf.double())
        flops = 2 * M * N * C
        # references: what an unfused MLP runs
        ref_fwd = lambda: F.gelu(F.linear(x, wf))  # noqa: E731
        ref_bwd = lambda: torch.ops.aten.gelu_backward(F.linear(dy, wp.t()), pre_bf)  # noqa: E731
        mm_fwd = lambda: F.linear(x, wf)  # noqa: E731
        mm_bwd = lambda: F.linear(dy, wp.t())  # noqa: E731
        for name, fn in (("ref_fwd", ref_fwd), ("ref_bwd", ref_bwd), ("mm_fwd", mm_fwd), ("mm_bwd", mm_bwd)):
            med, p25, p75 = bench(fn)
            print(f"MLP C={C} {name}: {med:.1f} us ({p25:.1f}-{p75:.1f}) {flops / med / 1e6:.0f} TFLOP/s", flush=True)
        pre = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        act = torch.empty_like(pre)
        dpre = torch.empty_like(pre)
        for variant in ("repo", "tma", "tma_p"):
            for BM, BN, BK, warps, stages in configs:
                tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
                runs = {}
                if variant == "repo":
                    grid = (tiles,)
                    runs["fwd"] = lambda: _fc_gelu_kernel[grid](x, wf, act, pre, act, M, N, C, C, wf.stride(0), 1,
                                                                 HAS_BIAS=False, BACKWARD=False, PRECISION="tf32",
                                                                 BM=BM, BN=BN, BK=BK, GROUP_M=8, num_warps=warps,
                                                                 num_stages=stages)
                    runs["bwd"] = lambda: _fc_gelu_kernel[grid](dy, wp, act, pre_bf, dpre, M, N, C, C, 1, wp.stride(0),
                                                                 HAS_BIAS=False, BACKWARD=True, PRECISION="tf32",
                                                                 BM=BM, BN=BN, BK=BK, GROUP_M=8, num_warps=warps,
                                                                 num_stages=stages)
                else:
                    kern = _fc_gelu_tma if variant == "tma" else _fc_gelu_tma_p
                    grid = (tiles,) if variant == "tma" else (min(sms, tiles),)
                    a_f = TensorDescriptor.from_tensor(x, [BM, BK])
                    b_f = TensorDescriptor.from_tensor(wf, [BN, BK])
                    pre_d = TensorDescriptor.from_tensor(pre, [BM, BN])
                    act_d = TensorDescriptor.from_tensor(act, [BM, BN])
                    a_b = TensorDescriptor.from_tensor(dy, [BM, BK])
                    b_b = TensorDescriptor.from_tensor(wp, [BK, BN])
                    prebf_d = TensorDescriptor.from_tensor(pre_bf, [BM, BN])
                    dpre_d = TensorDescriptor.from_tensor(dpre, [BM, BN])
                    runs["fwd"] = lambda: kern[grid](a_f, b_f, pre_d, act_d, M, N, C, BACKWARD=False, B_NK=True,
                                                     BM=BM, BN=BN, BK=BK, GROUP_M=8, STAGES=stages,
                                                     num_warps=warps)
                    runs["bwd"] = lambda: kern[grid](a_b, b_b, prebf_d, dpre_d, M, N, C, BACKWARD=True, B_NK=False,
                                                     BM=BM, BN=BN, BK=BK, GROUP_M=8, STAGES=stages,
                                                     num_warps=warps)
                for direction, fn in runs.items():
                    tag = f"MLP C={C} {variant} {direction} BM={BM} BN={BN} BK={BK} w={warps} s={stages}"
                    try:
                        pre.zero_(), act.zero_(), dpre.zero_()
                        fn()
                        torch.cuda.synchronize()
                        if direction == "fwd":
                            ok1, e1 = close(pre, pre_ref64)
                            ok2, e2 = close(act, act_ref64)
                            ok, err = ok1 and ok2, max(e1, e2)
                        else:
                            ok, err = close(dpre, dpre_ref64)
                        if not ok:
                            print(f"{tag}: WRONG (max err {err:.3g})", flush=True)
                            continue
                        med, p25, p75 = bench(fn)
                        print(f"{tag}: {med:.1f} us ({p25:.1f}-{p75:.1f}) {flops / med / 1e6:.0f} TFLOP/s "
                              f"err {err:.2g}", flush=True)
                    except Exception as e:  # noqa: BLE001
                        print(f"{tag}: {type(e).__name__}: {str(e)[:300]}", flush=True)


if __name__ == "__main__":
    main()
