"""What one program a SM can stream: a weight matrix (bf16, larger than L2) read in (BN, BK) chunks
by P programs, each chunk multiplied with a (16, BK) batch on the tensor cores (DOT, as
decode=persistent's multi-row phases) or summed (no dot), the K loop pipelined STAGES deep. Checked
against torch first (the products), then timed with triton.testing.do_bench. Prints GB/s and GB/s
a program."""
import sys
import torch
import triton
import triton.language as tl


@triton.jit
def _stream(W, X, OUT, N, K: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, B_PAD: tl.constexpr,
            STAGES: tl.constexpr, DOT: tl.constexpr):
    pid = tl.program_id(0)
    rows = tl.arange(0, B_PAD)
    for tile in range(pid, N // BN, tl.num_programs(0)):
        offs_n = tile * BN + tl.arange(0, BN)
        acc = tl.zeros([BN, B_PAD], dtype=tl.float32)
        for k0 in tl.range(0, K, BK, num_stages=STAGES):
            offs_k = k0 + tl.arange(0, BK)
            w = tl.load(W + offs_n[:, None] * K + offs_k[None, :])
            if DOT:
                x = tl.load(X + rows[:, None] * K + offs_k[None, :])
                acc = tl.dot(w, tl.trans(x), acc)
            else:
                acc += tl.sum(w.to(tl.float32), 1)[:, None]
        tl.store(OUT + offs_n[:, None] * B_PAD + rows[None, :], acc)


def main():
    dev = "cuda"
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    K, N = 1152, 4608 * 40  # 425 MB of bf16: far past the 50 MB L2
    torch.manual_seed(0)
    W = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
    X = torch.randn(16, K, device=dev, dtype=torch.bfloat16)
    out = torch.empty(N, 16, device=dev, dtype=torch.float32)
    ref = (W.float() @ X.float().t())
    ref_sum = W.float().sum(1)
    configs = [(sms, 64, 128, s, True) for s in (1, 2, 3, 4)] + [(72, 64, 128, 3, True)] + \
              [(sms, bn, bk, s, True) for bn, bk in ((32, 128), (64, 256), (128, 128), (64, 64)) for s in (1, 3)] + \
              [(sms, 64, 128, s, False) for s in (1, 3)] + [(2 * sms, 64, 128, 3, True), (sms, 64, 128, 3, True, 4)]
    for cfg in configs:
        P, BN, BK, S, dot = cfg[:5]
        warps = cfg[5] if len(cfg) > 5 else 8
        run = lambda: _stream[(P,)](W, X, out, N, K, BN, BK, 16, S, dot, num_warps=warps)  # noqa: E731
        try:
            run()
            torch.cuda.synchronize()
            good = torch.allclose(out, ref, rtol=2e-2, atol=2e-1) if dot else \
                torch.allclose(out[:, 0], ref_sum, rtol=1e-3, atol=1e-1)
            if not good:
                print(f"STREAM P={P} BN={BN} BK={BK} STAGES={S} dot={dot}: WRONG", flush=True)
                continue
            ms = triton.testing.do_bench(run, warmup=50, rep=300, return_mode="median")
            q = triton.testing.do_bench(run, warmup=10, rep=300, quantiles=[0.25, 0.75])
        except Exception as e:  # noqa: BLE001
            print(f"STREAM P={P} BN={BN} BK={BK} STAGES={S} dot={dot}: {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        gbs = W.numel() * 2 / ms / 1e6
        print(f"STREAM P={P} BN={BN} BK={BK} STAGES={S} warps={warps} dot={dot}: {ms * 1e3:.0f} us "
              f"(p25-p75 {q[0] * 1e3:.0f}-{q[1] * 1e3:.0f}) {gbs:,.0f} GB/s, {gbs / P:.1f} GB/s a program", flush=True)


if __name__ == "__main__":
    sys.exit(main())
