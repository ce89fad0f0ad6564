"""How fast a persistent grid streams decode weights, by layout: the MLP's W_fc at 1152 wide
(4608 x 1152 bf16), 18 layers (191 MB, past L2), a matvec of 1 or 8 rows (padded to 16) on the
tensor cores, as decode=persistent's MLP phase runs it. Row-major blocks (BN rows x BK columns,
BK*2-byte segments, the kernel's layout today) against the same blocks packed contiguous
(tile-major: each (BN, BK) chunk one run of BN*BK*2 bytes). Gate: every layer's product against
a float64 matvec. Timing: triton.testing.do_bench (L2 cleared before each rep), median, p25-p75."""
import json
import os
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _stream(W, X, Y, L: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
            B_PAD: tl.constexpr, PACKED: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    tiles: tl.constexpr = N // BN
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    offs_b = tl.arange(0, B_PAD)
    for layer in range(L):
        w_layer = W + layer * N * K
        for tile in range(pid, tiles, nprog):
            acc = tl.zeros([BN, B_PAD], dtype=tl.float32)
            for k0 in tl.range(0, K, BK, num_stages=STAGES):
                if PACKED:
                    ptr = w_layer + (tile * (K // BK) + k0 // BK) * (BN * BK) + offs_n[:, None] * BK + offs_k[None, :]
                else:
                    ptr = w_layer + (tile * BN + offs_n)[:, None] * K + k0 + offs_k[None, :]
                w = tl.load(ptr)
                x = tl.load(X + offs_b[:, None] * K + k0 + offs_k[None, :])
                acc = tl.dot(w, tl.trans(x), acc)
            tl.store(Y + layer * N * B_PAD + (tile * BN + offs_n)[:, None] * B_PAD + offs_b[None, :], acc)


def main():
    L, N, K = 18, 4608, 1152
    dev = "cuda"
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    g = torch.Generator(device=dev).manual_seed(0)
    W = (torch.randn(L, N, K, device=dev, generator=g) * 0.02).to(torch.bfloat16)
    out = []
    for rows in (1,):
        B_PAD = 16
        X = torch.zeros(B_PAD, K, device=dev, dtype=torch.bfloat16)
        X[:rows] = torch.randn(rows, K, device=dev, generator=g).to(torch.bfloat16)
        ref = torch.einsum("lnk,bk->lnb", W.double(), X.double())  # float64 reference
        for BN, BK, STAGES, warps, packed, grid in [
            (64, 128, 3, 8, False, sms), (64, 128, 3, 8, True, sms), (64, 128, 4, 8, True, sms),
            (64, 128, 5, 8, True, sms), (64, 128, 2, 8, True, sms), (32, 128, 3, 8, True, sms),
            (32, 128, 3, 4, True, 2 * sms), (64, 128, 3, 4, True, 2 * sms), (16, 128, 4, 4, True, 2 * sms),
            (128, 128, 3, 8, True, sms), (128, 64, 4, 8, True, sms), (32, 128, 4, 8, True, sms),
            (64, 64, 6, 8, True, sms), (64, 128, 3, 8, True, 72)]:
            if packed:
                Wl = W.view(L, N // BN, BN, K // BK, BK).permute(0, 1, 3, 2, 4).contiguous()
            else:
                Wl = W
            Y = torch.empty(L, N, B_PAD, device=dev, dtype=torch.float32)

            def run():
                _stream[(grid,)](Wl, X, Y, L, N, K, BN, BK, B_PAD, packed, STAGES, num_warps=warps, num_stages=1)
            run()
            torch.cuda.synchronize()
            err = (Y.double() - ref).abs().max().item()
            ok = err < 1e-2 * ref.abs().max().item()
            row = dict(rows=rows, BN=BN, BK=BK, STAGES=STAGES, warps=warps, packed=packed, grid=grid,
                       segment_bytes=(BN * BK * 2 if packed else BK * 2), max_err=err, ok=ok)
            if ok:
                ms = triton.testing.do_bench(run, warmup=25, rep=200, return_mode="all")
                ms = sorted(ms)
                med, p25, p75 = ms[len(ms) // 2], ms[len(ms) // 4], ms[3 * len(ms) // 4]
                row.update(ms=med, p25=p25, p75=p75, TBps=W.numel() * 2 / med / 1e9)
            del Wl
            out.append(row)
            print(json.dumps(row), flush=True)
    # the roofline this machine's copy engine-free read reaches: torch's sum of the same bytes
    ms = triton.testing.do_bench(lambda: W.sum(dtype=torch.float32), warmup=25, rep=200, return_mode="median")
    out.append(dict(what="W.sum (a full read of the 191 MB)", ms=ms, TBps=W.numel() * 2 / ms / 1e9))
    print(json.dumps(out[-1]))
    with open(os.path.join(os.environ.get("OUT", "."), "stream_bench.json"), "w") as f:
        json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                       rows=out), f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
