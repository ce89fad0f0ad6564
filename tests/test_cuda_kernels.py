"""CUDA kernels: attention ladder v1..v5 and the softmax kernels.

CPU/CI: every .cu file compiles with plain nvcc; the backends refuse cleanly without a GPU; the
reference backwards match autograd; the stale build lock is reported. GPU (`pytest -m gpu`):
every version and softmax variant against float64 at the seed and odd shapes, outputs poisoned
with NaN first, fresh random inputs; gradients through the autograd.Functions; a short training
run against SDPA; a timing print (run with -s to see it).
"""
import math
import statistics
import subprocess
import sys
import time

import pytest
import torch
from conftest import ROOT, make_cfg

from kernels import cuda_build
from kernels.cuda_softmax import VARIANTS, CudaSoftmax, kernel_for, softmax_backward, softmax_forward
from transformerop.model.attention.base import BackendUnavailable, causal_mask
from transformerop.model.attention.cuda import (
    MASK_ERROR,
    VERSIONS,
    CudaAttention,
    CudaAttentionFn,
    attention_forward,
    reference_backward,
)

FP32_TOL, BF16_TOL = 1e-4, 2e-2
TOL = {torch.float32: FP32_TOL, torch.bfloat16: BF16_TOL}
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run with -m gpu on the device)")


def rel_err(x, ref):
    """Max abs error relative to the reference's largest magnitude (NaN anywhere -> inf)."""
    x, ref = x.double(), ref.double()
    if not torch.isfinite(x).all():
        return math.inf
    return ((x - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def reference_attention(q, k, v):
    q, k, v = (t.double() for t in (q, k, v))
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    s = s.masked_fill(~causal_mask(q.size(-2), k.size(-2), q.device), float("-inf"))
    return torch.softmax(s, -1) @ v


# ---- CPU / CI ------------------------------------------------------------------------------

CU_FILES = sorted((ROOT / "kernels").glob("*.cu"))


@pytest.mark.parametrize("path", CU_FILES, ids=[p.name for p in CU_FILES])
def test_cu_file_compiles_with_plain_nvcc(path):
    if cuda_build.find_nvcc() is None:
        pytest.skip("nvcc not installed (no CUDA toolkit)")
    cuda_build.nvcc_compile_check(path)


def test_cu_files_exist():
    assert {p.name for p in CU_FILES} >= {"attention.cu", "softmax.cu"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
@pytest.mark.parametrize("model", ["gpt", "gpt_addition"])
def test_cuda_attention_unavailable_without_gpu(model):
    cfg = make_cfg("attention=cuda", f"model={model}")
    with pytest.raises(BackendUnavailable, match=r"attention=cuda needs a CUDA GPU \(torch.cuda.is_available\(\) is False\)"):
        CudaAttention.check(cfg, torch.device("cpu"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
@pytest.mark.parametrize("variant", ["cuda_block", "cuda_warp", "cuda_adaptive"])
def test_cuda_softmax_unavailable_without_gpu(variant):
    with pytest.raises(BackendUnavailable, match="needs a CUDA GPU"):
        CudaSoftmax(variant, 1024).check(torch.device("cpu"))
    # and through the naive backend's own check, as a job would call it
    from transformerop.model.attention.naive import NaiveAttention
    with pytest.raises(BackendUnavailable, match=f"attention.softmax={variant} needs a CUDA GPU"):
        NaiveAttention.check(make_cfg("attention=naive", f"attention.softmax={variant}"), torch.device("cpu"))


@pytest.mark.parametrize("overrides,match", [
    (["attention.version=6"], "attention.version=6"),
    (["model=gpt", "model.n_embd=96", "model.n_head=2"], "head dims"),
])
def test_cuda_attention_rejects_bad_config(overrides, match):
    # (train.dtype=float16 is not a valid dtype at all: tests/test_config.py)
    with pytest.raises(ValueError, match=match):
        CudaAttention.check(make_cfg("attention=cuda", *overrides), torch.device("cpu"))


def test_masked_decode_paths_are_refused_for_a_causal_only_backend():
    from transformerop.decode import check
    with pytest.raises(ValueError, match="under an explicit mask, which attention=cuda refuses"):
        check(make_cfg("attention=cuda", "decode=static"), torch.device("cpu"))


def test_explicit_mask_is_refused_not_ignored():
    cfg = make_cfg("attention=cuda", "model=gpt")
    attn = CudaAttention(cfg.model, cfg.attention)
    q = torch.randn(1, 6, 1, 64)
    kv = torch.randn(1, 6, 5, 64)
    with pytest.raises(ValueError, match="takes no explicit mask") as e:
        attn.attend(q, kv, kv, torch.ones(1, 1, 1, 5, dtype=torch.bool))
    assert str(e.value) == MASK_ERROR
    assert CudaAttention.backward == "reference" and CudaAttention.supports_cache


def test_softmax_adaptive_dispatch():
    assert kernel_for("cuda_adaptive", 1024, 1024) == VARIANTS["cuda_block"]
    assert kernel_for("cuda_adaptive", 1023, 1024) == VARIANTS["cuda_warp"]
    assert kernel_for("cuda_warp", 10**6, 1) == VARIANTS["cuda_warp"]
    with pytest.raises(ValueError, match="cuda_adaptive"):
        CudaSoftmax("cuda_tree")


@pytest.mark.parametrize("tq,tk", [(1, 1), (7, 7), (33, 33), (1, 9), (5, 40)])
def test_reference_backward_matches_autograd(tq, tk):
    g = torch.Generator().manual_seed(tq * 100 + tk)
    q, g_out = (torch.randn(2, 3, tq, 32, generator=g) for _ in range(2))
    k, v = (torch.randn(2, 3, tk, 32, generator=g) for _ in range(2))
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    (reference_attention(*leaves) * g_out.double()).sum().backward()
    got = reference_backward(q, k, v, g_out, 1 / math.sqrt(32))
    for x, leaf in zip(got, leaves):
        assert rel_err(x, leaf.grad) < 1e-5


def test_softmax_backward_matches_autograd():
    x = torch.randn(6, 33, dtype=torch.float64).masked_fill(~causal_mask(6, 33, "cpu"), float("-inf"))
    x.requires_grad_()
    y = torch.softmax(x, -1)
    g = torch.randn_like(y)
    (y * g).sum().backward()
    assert rel_err(softmax_backward(y.detach().float(), g.float()), x.grad) < 1e-5


def _dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_build_lock_is_reported_not_waited_on(tmp_path):
    import os
    import socket
    assert cuda_build.lock_is_busy(tmp_path) is False  # no lock
    lock = tmp_path / "lock"
    lock.touch()
    assert cuda_build.lock_is_busy(tmp_path, stale_after_s=600) is True  # young, owner unknown: wait
    with pytest.raises(cuda_build.StaleBuildLock, match=str(lock)):
        cuda_build.lock_is_busy(tmp_path, stale_after_s=0)  # old, owner unknown
    old = time.time() - 3600
    os.utime(lock, (old, old))
    (tmp_path / "builder.pid").write_text(f"{socket.gethostname()} {_dead_pid()}")
    with pytest.raises(cuda_build.StaleBuildLock, match="no longer running"):
        cuda_build.lock_is_busy(tmp_path, stale_after_s=10**6)  # owner recorded and gone
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / "builder.pid").write_text(f"{socket.gethostname()} {sleeper.pid}")
        assert cuda_build.lock_is_busy(tmp_path, stale_after_s=0) is True  # a live build: wait
    finally:
        sleeper.kill()
        sleeper.wait()


def test_extension_name_keys_sources_and_arch():
    a, b = cuda_build.extension_name("90"), cuda_build.extension_name("80")
    assert a.startswith("tfo_kernels_sm90_") and b.startswith("tfo_kernels_sm80_") and a[-12:] != b[-12:]
    assert cuda_build.extension_name("90") == a  # deterministic: a second process finds the cache
    cpp, cu = cuda_build.sources()
    assert '#include "' not in cpp + "".join(cu)  # headers inlined: build dir is self-contained
    assert "cudaError_t attention_forward" in cpp


# ---- GPU -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ext():
    module = cuda_build.load()
    print(f"\n[cuda_build] {cuda_build.build_info()}")
    return module


@pytest.fixture
def no_tf32():
    """fp32 tolerances assume true fp32 matmuls in the torch reference backward."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def make_qkv(B, H, Tq, Tk, D, dtype, layout, seed):
    """Fresh random q, k, v in the layouts the model hands over: `qkv` = views of one fused
    projection (B, T, 3, H, D); `cache` = a prefix of a longer (B, H, Tmax, D) buffer."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=g, device="cuda").to(dtype)  # noqa: E731
    if layout == "qkv":
        assert Tq == Tk
        qkv = rnd(B, Tk, 3, H, D)
        return tuple(qkv[:, :, i].transpose(1, 2) for i in range(3))
    if layout == "cache":
        q = rnd(B, H, Tq, D)
        kc, vc = rnd(B, H, Tk + 11, D), rnd(B, H, Tk + 11, D)
        return q, kc[:, :, :Tk], vc[:, :, :Tk]
    return rnd(B, H, Tq, D), rnd(B, H, Tk, D), rnd(B, H, Tk, D)


SEED_SHAPE = (64, 6, 256, 256, 64, "contiguous")
FWD_SHAPES = [SEED_SHAPE, (64, 6, 256, 256, 64, "qkv")] + [
    (3, 2, t, t, d, "qkv") for t in (1, 7, 64, 255, 256) for d in (32, 64)] + [
    (3, 2, 1, 37, 32, "cache"), (3, 2, 1, 37, 64, "cache"), (2, 3, 5, 37, 64, "cache"),
    (3, 4, 40, 40, 16, "contiguous"), (2, 2, 65, 65, 128, "contiguous")]
DTYPES = [torch.float32, torch.bfloat16]


def _sid(s):
    return f"B{s[0]}H{s[1]}Tq{s[2]}Tk{s[3]}D{s[4]}-{s[5]}"


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("shape", FWD_SHAPES, ids=_sid)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("version", VERSIONS)
def test_attention_forward_matches_float64(ext, version, dtype, shape):
    B, H, Tq, Tk, D, layout = shape
    q, k, v = make_qkv(B, H, Tq, Tk, D, dtype, layout, seed=version * 7919 + sum(map(ord, _sid(shape))))
    out = torch.full((B, Tq, H, D), float("nan"), dtype=dtype, device="cuda").transpose(1, 2)
    attention_forward(q, k, v, version, 1 / math.sqrt(D), out=out)
    err = rel_err(out, reference_attention(q, k, v))
    assert err < TOL[dtype], f"v{version} {dtype} {shape}: rel err {err:.3g}"


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("shape", [(3, 2, 64, 64, 32, "qkv"), (2, 3, 255, 255, 64, "qkv"),
                                   (2, 2, 1, 37, 64, "cache"), (2, 2, 5, 37, 64, "cache")], ids=_sid)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("version", VERSIONS)
def test_attention_backward_matches_float64(ext, no_tf32, version, dtype, shape):
    B, H, Tq, Tk, D, layout = shape
    q, k, v = (t.detach().clone().requires_grad_() for t in make_qkv(B, H, Tq, Tk, D, dtype, layout, seed=version))
    g = torch.randn(B, H, Tq, D, device="cuda").to(dtype)
    (CudaAttentionFn.apply(q, k, v, version, 1 / math.sqrt(D)) * g).float().sum().backward()
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    (reference_attention(*leaves) * g.double()).sum().backward()
    for name, x, leaf in zip("qkv", (q, k, v), leaves):
        assert x.grad.dtype == dtype
        err = rel_err(x.grad, leaf.grad)
        assert err < TOL[dtype], f"d{name} v{version} {dtype} {shape}: rel err {err:.3g}"


SM_SHAPES = [(64 * 6 * 256, 256), (3, 1), (7, 7), (5, 255), (33, 1000), (4, 4097), (1000, 64)]


def masked_scores(rows, n, dtype, seed):
    """Random scores with a causal-style -inf tail: row r keeps its first (r % n) + 1 entries."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = 3 * torch.randn(rows, n, generator=g, device="cuda")
    keep = torch.arange(n, device="cuda")[None, :] <= (torch.arange(rows, device="cuda") % n)[:, None]
    return x.masked_fill(~keep, float("-inf")).to(dtype)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("shape", SM_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("variant", ["cuda_block", "cuda_warp", "cuda_adaptive"])
def test_softmax_forward_matches_float64(ext, variant, dtype, shape):
    rows, n = shape
    x = masked_scores(rows, n, dtype, seed=rows * 31 + n)
    out = torch.full_like(x, float("nan"))
    softmax_forward(x, kernel_for(variant, n, threshold=128), out=out)  # adaptive: both kernels used
    err = rel_err(out, torch.softmax(x.double(), -1))
    assert err < TOL[dtype], f"{variant} {dtype} {shape}: rel err {err:.3g}"


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("variant", ["cuda_block", "cuda_warp", "cuda_adaptive"])
def test_softmax_autograd_matches_float64(ext, variant, dtype):
    x = masked_scores(96, 255, dtype, seed=5).view(2, 3, 16, 255).requires_grad_()
    g = torch.randn(x.shape, device="cuda").to(dtype)
    y = CudaSoftmax(variant, threshold=256)(x)
    (y * g).float().sum().backward()
    xd = x.detach().double().requires_grad_()
    yd = torch.softmax(xd, -1)
    (yd * g.double()).sum().backward()
    assert rel_err(y, yd) < TOL[dtype] and rel_err(x.grad, xd.grad) < TOL[dtype]


def _module_pair():
    from transformerop.model.attention.sdpa import SDPAAttention
    cfg = make_cfg("attention=cuda", "model=gpt", "model.dropout=0.0", "model.n_embd=128", "model.n_head=2")
    cuda_attn = CudaAttention(cfg.model, cfg.attention).cuda()
    sdpa = SDPAAttention(cfg.model, cfg.attention).cuda()
    sdpa.load_state_dict(cuda_attn.state_dict())
    return cuda_attn, sdpa


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("version", VERSIONS)
def test_module_matches_sdpa_forward_backward(ext, no_tf32, version):
    cuda_attn, sdpa = _module_pair()
    cuda_attn.version = version
    x = torch.randn(3, 50, 128, device="cuda", requires_grad=True)
    y1, y2 = cuda_attn(x), sdpa(x)
    assert rel_err(y1, y2) < 1e-4
    g = torch.randn_like(y1)
    (gx1, gw1), (gx2, gw2) = (torch.autograd.grad((y * g).sum(), (x, m.c_attn.weight))
                              for y, m in ((y1, cuda_attn), (y2, sdpa)))
    assert rel_err(gx1, gx2) < 1e-4 and rel_err(gw1, gw2) < 1e-4


def _train_losses(attention, steps=100):
    from transformerop.model import build_model
    cfg = make_cfg(f"attention={attention}", "model=gpt", "model.n_layer=2", "model.n_embd=128",
                   "model.n_head=2", "model.block_size=64", "model.dropout=0.0")
    torch.manual_seed(0)
    model = build_model(cfg, vocab_size=65).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator(device="cuda").manual_seed(1)
    starts = torch.randint(0, 65, (16, 1), generator=g, device="cuda")
    data = (starts + 3 * torch.arange(65, device="cuda")) % 65  # learnable: next = current + 3
    losses = []
    for _ in range(steps):
        _, loss = model(data[:, :-1], data[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.gpu
@needs_gpu
def test_short_training_lowers_loss_like_sdpa(ext, no_tf32):
    cuda, sdpa = _train_losses("cuda"), _train_losses("sdpa")
    print(f"\n[train 100 steps] cuda {cuda[0]:.4f} -> {cuda[-1]:.4f}   sdpa {sdpa[0]:.4f} -> {sdpa[-1]:.4f}")
    assert cuda[-1] < cuda[0] - 1.0
    assert abs(cuda[-1] - sdpa[-1]) < 0.05


def _median_ms(fn, warmup=3, repeats=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), min(times), max(times)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_timing_report(ext, dtype):
    """Not a gate: prints the ladder at the seed shape (run pytest with -s to see it)."""
    import torch.nn.functional as F
    B, H, T, _, D, _ = SEED_SHAPE
    q, k, v = make_qkv(B, H, T, T, D, dtype, "contiguous", seed=123)
    rows = [("sdpa", _median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)))]
    rows += [(f"cuda v{ver}", _median_ms(lambda ver=ver: attention_forward(q, k, v, ver, 1 / math.sqrt(D))))
             for ver in VERSIONS]
    x = masked_scores(B * H * T, T, dtype, seed=9)
    rows += [("softmax torch", _median_ms(lambda: torch.softmax(x, -1)))]
    rows += [(f"softmax {name}", _median_ms(lambda kid=kid: softmax_forward(x, kid))) for name, kid in VARIANTS.items()]
    print(f"\n[timing {dtype}] B{B} H{H} T{T} D{D}: median (min..max) ms over 20 repeats")
    for name, (med, lo, hi) in rows:
        print(f"  {name:16s} {med:8.4f}  ({lo:.4f}..{hi:.4f})")
    assert all(med > 0 for _, (med, _, _) in rows)
