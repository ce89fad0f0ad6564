"""Two small passes of the train step against what could replace them, at the step's shapes:

1. GELU forward and backward (exact, erf) over the MLP's (16,384 x 4C) bf16 activations: PyTorch's
   kernels against plain Triton elementwise kernels (BLOCK elements a program), beside a bf16 copy
   of the same bytes (torch's clone: the bandwidth an elementwise pass can hope for).
2. The fused norm's backward (kernels/triton_norm._backward: the kernel and its dw partial-sum
   reduction, (n / 8) x C fp32 summed over dim 0 by torch) against the same kernel storing its
   partial sums transposed, (C x n / 8), summed over the contiguous dim.

Each candidate is checked first (GELU against float64; the norm's dx, dbr, dw against the repo's
own), then timed with triton.testing.do_bench: median (p25-p75), microseconds, and GB/s moved."""
import torch
import triton
import triton.language as tl

from kernels import triton_norm as TN
from kernels.triton_dropout import kept, row_keys

SQRT1_2 = tl.constexpr(0.7071067811865476)
INV_SQRT_2PI = tl.constexpr(0.3989422804014327)


@triton.jit
def _gelu_fwd(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(Y + offs, (0.5 * x * (1.0 + tl.math.erf(x * SQRT1_2))).to(Y.dtype.element_ty), mask=m)


@triton.jit
def _gelu_bwd(DY, X, DX, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m, other=0.0).to(tl.float32)
    dy = tl.load(DY + offs, mask=m, other=0.0).to(tl.float32)
    d = 0.5 * (1.0 + tl.math.erf(x * SQRT1_2)) + x * tl.exp(-0.5 * x * x) * INV_SQRT_2PI
    tl.store(DX + offs, (dy * d).to(DX.dtype.element_ty), mask=m)


@triton.jit
def _norm_bwd_t(DY, DH_IN, H, W, MEAN, RSTD, DX, DBR, DW_PART, SEED, drop_thr, drop_scale, n_rows, C,
                rows_per_prog, n_progs, ROWS: tl.constexpr, BLOCK_C: tl.constexpr):
    """kernels/triton_norm._add_norm_bwd (HAS_DH, HAS_RES, DROPOUT, no bias) with its dw partial
    sums stored transposed: DW_PART[c, program]."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_C)
    cmask = cols < C
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_C], dtype=tl.float32)
    first = pid * rows_per_prog
    end = tl.minimum(first + rows_per_prog, n_rows)
    seed = tl.load(SEED)
    for r0 in range(first, end, ROWS):
        rows = r0 + tl.arange(0, ROWS)
        rmask = rows < end
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
        dh += tl.load(DH_IN + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(DX + offs, dh.to(DX.dtype.element_ty), mask=mask)
        keys = row_keys(seed, rows.to(tl.int64), True)
        dbr = tl.where(kept(keys[:, None], cols[None, :], drop_thr), dh * drop_scale, 0.0)
        tl.store(DBR + offs, dbr.to(DBR.dtype.element_ty), mask=mask)
        dw += tl.sum(dy * xhat, axis=0)
    tl.store(DW_PART + cols * n_progs + pid, dw, mask=cmask)


def bench(fn):
    med = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
    p25, p75 = triton.testing.do_bench(fn, warmup=5, rep=200, quantiles=[0.25, 0.75])
    return med * 1e3, p25 * 1e3, p75 * 1e3


def line(tag, fn, nbytes):
    med, p25, p75 = bench(fn)
    print(f"{tag}: {med:.1f} us ({p25:.1f}-{p75:.1f}) {nbytes / med / 1e3:.0f} GB/s", flush=True)


def gelu64(z):
    return 0.5 * z * (1.0 + torch.erf(z / 2 ** 0.5))


def dgelu64(z):
    return 0.5 * (1.0 + torch.erf(z / 2 ** 0.5)) + z * torch.exp(-0.5 * z * z) / (2 * torch.pi) ** 0.5


def gelu_rows():
    torch.manual_seed(0)
    for C in (384, 768, 1152):
        x = torch.randn(16384, 4 * C, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn_like(x)
        n, nb = x.numel(), x.numel() * 2
        y, dx = torch.empty_like(x), torch.empty_like(x)
        ref_y, ref_dx = gelu64(x.double()), dy.double() * dgelu64(x.double())
        line(f"GELU C={C} clone", lambda: x.clone(), 2 * nb)
        line(f"GELU C={C} torch fwd", lambda: torch.nn.functional.gelu(x), 2 * nb)
        line(f"GELU C={C} torch bwd", lambda: torch.ops.aten.gelu_backward(dy, x), 3 * nb)
        for block in (1024, 2048, 4096, 8192):
            for warps in (4, 8):
                grid = (triton.cdiv(n, block),)
                fwd = lambda: _gelu_fwd[grid](x, y, n, BLOCK=block, num_warps=warps)  # noqa: E731
                bwd = lambda: _gelu_bwd[grid](dy, x, dx, n, BLOCK=block, num_warps=warps)  # noqa: E731
                fwd(), bwd()
                torch.cuda.synchronize()
                ef = ((y.double() - ref_y).abs() / (ref_y.abs() + 1e-2)).max().item()
                eb = ((dx.double() - ref_dx).abs() / (ref_dx.abs() + 1e-2)).max().item()
                if ef > 1e-2 or eb > 1e-2:
                    print(f"GELU C={C} triton BLOCK={block} w={warps}: WRONG ({ef:.3g}, {eb:.3g})", flush=True)
                    continue
                line(f"GELU C={C} triton fwd BLOCK={block} w={warps}", fwd, 2 * nb)
                line(f"GELU C={C} triton bwd BLOCK={block} w={warps}", bwd, 3 * nb)


def norm_rows():
    torch.manual_seed(0)
    for C in (384, 768, 1152):
        n, dev = 16384, "cuda"
        h = torch.randn(n, C, device=dev)
        w = torch.randn(C, device=dev)
        mean, rstd = h.mean(1), torch.rsqrt(h.var(1, unbiased=False) + 1e-5)
        dy = torch.randn(n, C, device=dev).to(torch.bfloat16)
        dh_in = torch.randn(n, C, device=dev)
        seed = torch.tensor([1234, 0], device=dev)[:1]
        p = 0.2
        nbytes = n * C * (2 + 4 + 4 + 4 + 2)  # dy, dh_in, h read; dx (fp32), dbr (bf16) written

        def repo():
            return TN._backward(dy, dh_in, h, w, None, mean, rstd, seed, p, torch.float32, torch.bfloat16)

        progs = triton.cdiv(n, 8)
        dx, dbr = torch.empty(n, C, device=dev), torch.empty(n, C, device=dev, dtype=torch.bfloat16)
        part = torch.empty(C, progs, device=dev)

        def transposed():
            _norm_bwd_t[(progs,)](dy, dh_in, h, w, mean, rstd, dx, dbr, part, seed, TN.threshold(p), 1 / (1 - p), n, C,
                                  8, progs, ROWS=2, BLOCK_C=triton.next_power_of_2(C), num_warps=2)
            return dx, dbr, part.sum(1)

        r = repo()
        t = transposed()
        torch.cuda.synchronize()
        same = torch.equal(r[0], t[0]) and torch.equal(r[1], t[1])
        dw_err = ((r[2] - t[2]).abs().max() / r[2].abs().max()).item()
        print(f"NORM C={C} transposed vs repo: dx, dbr equal {same}; dw rel err {dw_err:.2g}", flush=True)
        if not same or dw_err > 1e-5:
            continue
        line(f"NORM C={C} repo backward + sum(0)", repo, nbytes)
        line(f"NORM C={C} transposed backward + sum(1)", transposed, nbytes)
        pr = torch.empty(progs, C, device=dev)
        line(f"NORM C={C} sum(0) of ({progs}, {C}) alone", lambda: pr.sum(0), progs * C * 4)
        line(f"NORM C={C} sum(1) of ({C}, {progs}) alone", lambda: part.sum(1), progs * C * 4)


if __name__ == "__main__":
    gelu_rows()
    norm_rows()
