"""Start-up diagnostics: in a fresh process, what each first call costs (synced), in the speedrun's
shapes (B 64, T 256, C 384, H 6, bf16), and whether a first cuDNN SDPA call in a thread overlaps
Python work in the main thread (torch ops release the GIL)."""
import sys
import time
t0 = time.time()
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
t = {"import torch": time.time() - t0}
mode = sys.argv[1]


def timed(name, fn):
    s = time.time()
    fn()
    torch.cuda.synchronize()
    t[name] = time.time() - s


timed("cuda init", lambda: torch.zeros(1, device="cuda"))
dev = "cuda"
bf = torch.bfloat16
a = torch.randn(64 * 256, 384, device=dev, dtype=bf)
w = torch.randn(1152, 384, device=dev, dtype=bf)


def sdpa(backend=None):
    q, k, v = (torch.randn(64, 6, 256, 64, device=dev, dtype=bf, requires_grad=True) for _ in range(3))
    if backend is None:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.2)
    else:
        from torch.nn.attention import sdpa_kernel
        with sdpa_kernel(backend):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.2)
    o.sum().backward()


if mode == "order":
    timed("cublas first matmul", lambda: a @ w.T)
    timed("cublas second", lambda: a @ w.T)
    timed("sdpa first fwd+bwd (default)", sdpa)
    timed("sdpa second", sdpa)
    from torch.nn.attention import SDPBackend
    timed("sdpa flash first", lambda: sdpa(SDPBackend.FLASH_ATTENTION))
    timed("sdpa flash second", lambda: sdpa(SDPBackend.FLASH_ATTENTION))
    p = [torch.randn(384, 384, device=dev, requires_grad=True) for _ in range(20)]
    for x in p:
        x.grad = torch.randn_like(x)
    opt = torch.optim.AdamW(p, lr=1e-3, fused=True)
    timed("fused adamw first", opt.step)
    timed("fused adamw second", opt.step)
    s = time.time()
    from kernels.triton_norm import add_norm  # noqa: E402
    t["import triton_norm"] = time.time() - s
    ln = torch.nn.LayerNorm(384, bias=False).to(dev)
    xs = torch.randn(64, 256, 384, device=dev, dtype=bf, requires_grad=True)
    br = torch.randn(64, 256, 384, device=dev, dtype=bf, requires_grad=True)
    seed = torch.zeros(1, dtype=torch.int64, device=dev)

    def norm():
        r, y = add_norm(xs, br, ln, 0.2, seed)
        (r.float().sum() + y.float().sum()).backward()
    timed("triton add_norm first fwd+bwd", norm)
    timed("triton add_norm second", norm)
else:  # thread: the first SDPA fwd+bwd in a thread while the main thread spends 0.4 s in Python
    import threading
    s = time.time()
    th = threading.Thread(target=lambda: (sdpa(), a @ w.T, torch.cuda.synchronize()))
    th.start()
    n = 0
    while time.time() - s < 0.4:
        n += sum(i * i for i in range(1000))
    t["main python 0.4 s done"] = time.time() - s
    th.join()
    t["thread joined"] = time.time() - s
    timed("sdpa after the thread", sdpa)
for k, v in t.items():
    print(f"{mode}: {k}: {v * 1e3:.1f} ms")
