"""Scratch: how fast can one program per SM stream a bf16 weight matrix (the persistent decode's MLP
shape) in Triton? Each program takes rows tile by tile (BN rows, BK columns a chunk) and multiplies
them by a (16, C) input on the tensor cores (DOT) or by one row with multiply-adds (FMA); the chunk
loop is tl.range(num_stages=S). GB/s = matrix bytes / median time (triton.testing.do_bench).
    python3 .gpu/stream_bench.py"""
import torch
import triton
import triton.language as tl


@triton.jit
def _stream(W, X, OUT, R: tl.constexpr, C: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, S: tl.constexpr,
            DOT: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    rows = tl.arange(0, 16)
    for tile in range(pid, R // BN, nprog):
        offs_n = tile * BN + tl.arange(0, BN)
        if DOT:
            acc = tl.zeros([BN, 16], dtype=tl.float32)
        else:
            acc = tl.zeros([BN], dtype=tl.float32)
        for k0 in tl.range(0, C, BK, num_stages=S):
            offs_k = k0 + tl.arange(0, BK)
            w = tl.load(W + offs_n[:, None] * C + offs_k[None, :], mask=(offs_k < C)[None, :], other=0.0)
            if DOT:
                x = tl.load(X + rows[:, None] * C + offs_k[None, :], mask=(offs_k < C)[None, :], other=0.0)
                acc = tl.dot(w, tl.trans(x), acc)
            else:
                x = tl.load(X + offs_k, mask=offs_k < C, other=0.0).to(tl.float32)
                acc += tl.sum(w.to(tl.float32) * x[None, :], 1)
        if DOT:
            tl.store(OUT + offs_n, tl.sum(acc, 1))
        else:
            tl.store(OUT + offs_n, acc)


progs = torch.cuda.get_device_properties(0).multi_processor_count
for C, R in ((1152, 4608 * 16), (1152, 4608)):  # 16 layers' W_fc (past L2), then one layer's
    w = torch.randn(R, C, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(16, C, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(R, device="cuda", dtype=torch.float32)
    ref = (w.float() @ x.float().T).sum(1)
    ref1 = w.float() @ x[0].float()
    for dot in (True, False):
        for bn in (8, 16, 32, 64):
            for bk in (128, 256, 512):
                for s in (1, 3):
                    for warps in (8,):
                        if dot and bn < 16:
                            continue
                        try:
                            f = lambda: _stream[(progs,)](w, x, out, R, C, bn, bk, s, dot, num_warps=warps)  # noqa: E731
                            f()
                            err = (out - (ref if dot else ref1)).abs().max().item() / (ref if dot else ref1).abs().max().item()
                            if err > 2e-2:
                                print(f"STREAM C={C} dot={dot} BN={bn} BK={bk} S={s} warps={warps} WRONG {err:.2e}", flush=True)
                                continue
                            ms = triton.testing.do_bench(f, warmup=5, rep=30)
                            print(f"STREAM C={C} R={R} dot={dot} BN={bn} BK={bk} S={s} warps={warps} {w.numel() * 2 / ms / 1e6:,.0f} GB/s "
                                  f"({ms * 1e3:.1f} us)", flush=True)
                        except Exception as e:  # noqa: BLE001 -- out of resources at this tile
                            print(f"STREAM C={C} dot={dot} BN={bn} BK={bk} S={s} warps={warps} FAILED {type(e).__name__}", flush=True)
