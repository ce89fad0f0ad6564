"""Triton attention: forward and backward against a float64 reference.

CPU: the kernels run under TRITON_INTERPRET=1 in ONE subprocess, because the variable must be
set before triton is imported and other tests in this pytest process may have imported it
already. GPU (`pytest -m gpu`): the seed shape and odd shapes, fp32 (TF32) and bf16, every tuned
config, and a short training run against SDPA. bf16 is checked on the GPU only: the triton 3.9
interpreter hands bf16 bit patterns to np.matmul in tl.dot, so its bf16 dots are garbage.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
FP32_TOL, TF32_TOL, BF16_TOL = 1e-4, 5e-3, 2e-2

# (name, B, H, Tq, Tk, D, dtype, causal, layout, forced configs or None)
CPU_CASES = [(f"T{t}_D{d}", 2, 2, t, t, d, "float32", True, "contiguous", None)
             for t in (1, 7, 33) for d in (32, 64)] + [
    ("decode_Tq1_Tk9", 2, 2, 1, 9, 64, "float32", True, "contiguous", None),
    ("chunk_Tq5_Tk40", 2, 2, 5, 40, 32, "float32", True, "contiguous", None),
    ("model_layout_T33", 2, 2, 33, 33, 32, "float32", True, "qkv_view", None),
    ("noncausal_Tq5_Tk40", 2, 2, 5, 40, 32, "float32", False, "contiguous", None),
    # the transposed tile shapes: BLOCK_M > BLOCK_N in the backward, < in the forward
    ("forced_T33", 2, 2, 33, 33, 64, "float32", True, "contiguous", ((16, 32), (32, 16))),
    ("forced_Tq5_Tk40", 2, 2, 5, 40, 32, "float32", True, "contiguous", ((16, 32), (32, 16))),
]

HELPERS = '''
import numpy as np
import torch

def reference(q, k, v, causal=True):
    """float64 softmax(q k^T / sqrt(D) + bottom-right causal mask) v."""
    q, k, v = (t.double() for t in (q, k, v))
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        t_q, t_k = q.shape[-2], k.shape[-2]
        s = s.masked_fill(~torch.ones(t_q, t_k, dtype=torch.bool, device=q.device).tril(t_k - t_q), float("-inf"))
    return torch.softmax(s, -1) @ v

def rel_err(a, ref):
    """max |a - ref| / max |ref|; the scale is floored at 1 (inputs are unit normal) because some
    references are exactly zero (T=1: dq = dk = 0) while TF32 leaves ~1e-3 noise there."""
    return ((a.double() - ref).abs().max() / ref.abs().max().clamp_min(1.0)).item()

def make_inputs(B, H, t_q, t_k, D, dtype, layout, device):
    if layout == "qkv_view":  # what the model passes: strided views of one (B, T, 3C) tensor
        qkv = torch.randn(B, t_k, 3 * H * D, device=device).to(dtype)
        q, k, v = (t.view(B, t_k, H, D).transpose(1, 2) for t in qkv.split(H * D, dim=2))
        q = q[:, :, t_k - t_q:]
    else:
        q = torch.randn(B, H, t_q, D, device=device).to(dtype)
        k, v = (torch.randn(B, H, t_k, D, device=device).to(dtype) for _ in range(2))
    return q, k, v

def run_case(ta, B, H, t_q, t_k, D, dtype, causal, layout, allow_tf32, device, dq="query_tiles"):
    """Errors of out, dq, dk, dv against float64; kernel outputs start as NaN."""
    ta.poison_outputs = True
    dtype = getattr(torch, dtype)
    q, k, v = make_inputs(B, H, t_q, t_k, D, dtype, layout, device)
    qkv = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    do = torch.randn(B, H, t_q, D, device=device).to(dtype)
    out = ta.attention(*qkv, causal=causal, allow_tf32=allow_tf32, dq=dq)
    out.backward(do)
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = reference(*ref_in, causal=causal)
    ref.backward(do.double())
    errs = {"out": rel_err(out, ref)}
    for name, got, want in zip(("dq", "dk", "dv"), qkv, ref_in):
        errs[name] = rel_err(got.grad, want.grad)
    return errs

def dropout_case(ta, p, device="cpu", dtype=torch.float32, allow_tf32=False, T=33, D=64, dq="query_tiles"):
    """Dropout against float64 under the kernel's own mask, read off with V = identity: then
    O = P * keep / (1 - p) (T <= D), so keep = O != 0. Also: the kept fraction, and how many
    decisions change with the seed."""
    B, H = 2, 2
    q, k, v = make_inputs(B, H, T, T, D, dtype, "contiguous", device)
    eye = torch.eye(T, D, device=device).expand(B, H, T, D).contiguous().to(dtype)
    with torch.no_grad():
        keep, other = ((ta.attention(q, k, eye, allow_tf32=allow_tf32, dropout_p=p, seed=s)[..., :T] != 0)
                       for s in (1234, 1235))
    qkv = [t.clone().requires_grad_() for t in (q, k, v)]
    do = torch.randn_like(q)
    out = ta.attention(*qkv, allow_tf32=allow_tf32, dropout_p=p, seed=1234, dq=dq)
    out.backward(do)
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    s = ref_in[0] @ ref_in[1].transpose(-1, -2) / D ** 0.5
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    ref = (torch.softmax(s.masked_fill(~causal, float("-inf")), -1) * keep / (1 - p)) @ ref_in[2]
    ref.backward(do.double())
    errs = {"out": rel_err(out, ref)}
    errs.update({n: rel_err(a.grad, b.grad) for n, a, b in zip(("dq", "dk", "dv"), qkv, ref_in)})
    visible = causal.sum().item() * B * H
    both = lambda a, b, ok: ((a & b)[ok.expand_as(a)].float().mean().item())  # noqa: E731
    bits = np.packbits(keep.reshape(B * H * T, T).cpu().numpy()).tobytes().hex()  # rows (b*H + h)*T + query
    return errs, {"kept": keep.sum().item() / visible, "changed": (keep != other).sum().item() / visible, "bits": bits,
                  "kept_pairs_along_keys": both(keep[..., 1:], keep[..., :-1], causal[:, 1:]),
                  "kept_pairs_along_queries": both(keep[..., 1:, :], keep[..., :-1, :], causal[:-1, :])}

def module_vs_sdpa():
    """TritonAttention (IEEE fp32) and SDPAAttention with the same weights: output and input grad."""
    from omegaconf import OmegaConf
    from transformerop.model.attention.sdpa import SDPAAttention
    from transformerop.model.attention.triton import TritonAttention
    mcfg = OmegaConf.create({"n_embd": 64, "n_head": 2, "dropout": 0.0, "bias": True})
    ours = TritonAttention(mcfg, OmegaConf.create({"name": "triton", "allow_tf32": False}))
    ref = SDPAAttention(mcfg, OmegaConf.create({"name": "sdpa"}))
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(2, 17, 64)
    xs = [x.clone().requires_grad_() for _ in range(2)]
    outs = [m(t) for m, t in zip((ours, ref), xs)]
    for o in outs:
        o.pow(2).sum().backward()
    return {"out": rel_err(outs[0], outs[1].double()), "dx": rel_err(xs[0].grad, xs[1].grad.double())}
'''

SCRIPT = HELPERS + '''
import json, sys
import kernels.triton_attention as ta
results = {}
for name, B, H, t_q, t_k, D, dtype, causal, layout, forced in json.loads(sys.argv[1]):
    torch.manual_seed(len(results))
    ta.force_configs = forced and [dict(BLOCK_M=m, BLOCK_N=n, num_warps=4, num_stages=1) for m, n in forced]
    results[name] = run_case(ta, B, H, t_q, t_k, D, dtype, causal, layout, False, "cpu")
    # the backward whose key tiles add dQ in fp32 atomics (attention.dq=atomic), on the same case
    torch.manual_seed(len(results) - 1)
    results[name + "_atomic_dq"] = run_case(ta, B, H, t_q, t_k, D, dtype, causal, layout, False, "cpu", dq="atomic")
ta.force_configs = None
results["dropout_atomic_dq"] = dropout_case(ta, 0.3, dq="atomic")[0]
results["module_vs_sdpa"] = module_vs_sdpa()
results["dropout"], results["dropout_mask"] = dropout_case(ta, 0.3)
# the model's head split (SplitHeads) into the kernels: the gradients come back as one buffer, and
# the split hands it on as c_attn's output gradient without a copy
from transformerop.model.attention.base import SplitHeads
real_grads_like, made, seen = ta._grads_like, [], []


def spy(q, k, v):
    out = real_grads_like(q, k, v)
    made.append(out[0].data_ptr())
    return out


ta._grads_like = spy
qkv = torch.randn(2, 33, 3 * 64).requires_grad_()
qkv.register_hook(lambda g: seen.append((g.data_ptr(), g.is_contiguous())))
do = torch.randn(2, 2, 33, 32)
out = ta.attention(*SplitHeads.apply(qkv, 2), allow_tf32=False)
out.backward(do)
ta._grads_like = real_grads_like
ref_qkv = qkv.detach().double().requires_grad_()
ref = reference(*(t.view(2, 33, 2, 32).transpose(1, 2) for t in ref_qkv.split(64, dim=2)))
ref.backward(do.double())
results["packed_heads"] = {"out": rel_err(out, ref), "dqkv": rel_err(qkv.grad, ref_qkv.grad)}
results["packed_no_copy"] = bool(made and seen and seen[0] == (made[0], True))
with torch.no_grad():  # the decode path: no autograd Function
    q, k, v = make_inputs(2, 2, 1, 9, 64, torch.float32, "contiguous", "cpu")
    results["nograd_decode"] = {"out": rel_err(ta.attention(q, k, v, allow_tf32=False), reference(q, k, v))}
print("RESULTS " + json.dumps(results))
'''


@pytest.fixture(scope="module")
def interpreted():
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(CPU_CASES)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS ")][-1]
    return json.loads(line[len("RESULTS "):])


@pytest.mark.parametrize("dq", ["", "_atomic_dq"])
@pytest.mark.parametrize("case", CPU_CASES, ids=[c[0] for c in CPU_CASES])
def test_interpreted_matches_float64(interpreted, case, dq):
    tol = BF16_TOL if case[6] == "bfloat16" else FP32_TOL
    errs = interpreted[case[0] + dq]
    assert all(e <= tol for e in errs.values()), f"{case[0]}: {errs} (tol {tol})"  # NaN fails too


@pytest.mark.parametrize("name", ["module_vs_sdpa", "nograd_decode", "packed_heads", "dropout_atomic_dq"])
def test_interpreted_extras(interpreted, name):
    errs = interpreted[name]
    assert all(e <= FP32_TOL for e in errs.values()), errs


def test_interpreted_packed_gradient_is_handed_on_without_a_copy(interpreted):
    """The backward wrote dq, dk, dv into one (B, T, 3, H, D) buffer, and c_attn's output got
    that very buffer as its gradient (the hook saw its address), contiguous as (B, T, 3C)."""
    assert interpreted["packed_no_copy"]


def test_interpreted_dropout(interpreted):
    """p = 0.3: forward and grads equal float64 under the kernel's mask; about 70% kept (4 sigma
    over 2,244 decisions); a new seed changes about 2 * 0.3 * 0.7 = 42% of them; neighbouring
    decisions are independent."""
    errs, mask = interpreted["dropout"], interpreted["dropout_mask"]
    assert all(e <= FP32_TOL for e in errs.values()), errs
    # the forward's decisions are the ones tests/test_dropout_hash.py's formula makes, wherever a
    # score is visible (row (b*H + h)*T + query, seed 1234; B = H = 2, T = 33)
    from test_dropout_hash import formula, unpack
    T = 33
    visible = np.tile(np.tril(np.ones((T, T), dtype=bool)), (4, 1))
    assert np.array_equal(unpack(mask["bits"], 4 * T, T)[visible], formula(1234, 0, 4 * T, T, 0.3)[visible])
    assert abs(mask["kept"] - 0.7) < 0.04 and abs(mask["changed"] - 0.42) < 0.06, mask
    # neighbours are independent: both kept with probability 0.7^2 = 0.49 (~2,100 pairs each)
    assert abs(mask["kept_pairs_along_keys"] - 0.49) < 0.05, mask
    assert abs(mask["kept_pairs_along_queries"] - 0.49) < 0.05, mask


def _cfg(dtype="float32"):
    from omegaconf import OmegaConf
    return OmegaConf.create({"train": {"dtype": dtype}, "attention": {"name": "triton"}})


def test_registry_and_check():
    from transformerop.model.attention import BackendUnavailable, get_backend
    from transformerop.model.attention.triton import TritonAttention
    assert get_backend("triton") is TritonAttention and TritonAttention.backward == "kernel"
    with pytest.raises(ValueError, match="float16"):
        TritonAttention.check(_cfg("float16"), torch.device("cpu"))
    if os.environ.get("TRITON_INTERPRET") != "1":
        with pytest.raises(BackendUnavailable, match="CUDA"):
            TritonAttention.check(_cfg(), torch.device("cpu"))


def test_explicit_mask_refused():
    from omegaconf import OmegaConf

    from transformerop.model.attention.triton import TritonAttention
    mcfg = OmegaConf.create({"n_embd": 64, "n_head": 2, "dropout": 0.0, "bias": True})
    attn = TritonAttention(mcfg, OmegaConf.create({"name": "triton"}))
    q = torch.randn(1, 2, 1, 32)
    with pytest.raises(ValueError, match="takes no explicit mask"):
        attn.attend(q, q, q, torch.ones(1, 1, 1, 1, dtype=torch.bool))


# ---------------------------------------------------------------- GPU (run on the device)
GPU_SHAPES = [(64, 6, 256, 256, 64), (3, 6, 1, 1, 64), (3, 6, 7, 7, 32), (3, 6, 64, 64, 64),
              (3, 6, 255, 255, 32), (3, 6, 255, 255, 64), (3, 6, 256, 256, 32), (2, 6, 1, 100, 64),
              (2, 6, 37, 300, 64)]


def _helpers():
    ns = {}
    exec(HELPERS, ns)  # the same reference code the interpreter run uses
    return ns


@pytest.mark.parametrize("dq", ["query_tiles", "atomic"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", GPU_SHAPES + [(2, 4, 1024, 1024, 128)], ids=lambda s: "B{}_H{}_Tq{}_Tk{}_D{}".format(*s))
@pytest.mark.parametrize("layout", ["contiguous", "qkv_view"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_matches_float64(shape, dtype, layout, dq):
    import kernels.triton_attention as ta
    if layout == "qkv_view" and shape[2] != shape[3]:
        pytest.skip("the model's layout has Tq == Tk")
    torch.manual_seed(0)
    errs = _helpers()["run_case"](ta, *shape, dtype, True, layout, True, "cuda", dq=dq)
    tol = BF16_TOL if dtype == "bfloat16" else TF32_TOL
    assert all(e <= tol for e in errs.values()), f"{errs} (tol {tol})"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cpp_launch", [True, False])
def test_gpu_packed_gradient_is_handed_on_without_a_copy(cpp_launch):
    """The seed's attention branch in bf16, through the C++ op and through Python: the input and
    weight gradients match SDPA's (same weights), and the backward runs no concatenation kernel
    (the q, k, v gradients are one buffer that the head split hands to c_attn as it is)."""
    from omegaconf import OmegaConf
    from torch.profiler import ProfilerActivity, profile

    from transformerop.measure.profiler import on_device
    from transformerop.model.attention.sdpa import SDPAAttention
    from transformerop.model.attention.triton import TritonAttention
    mcfg = OmegaConf.create({"n_embd": 384, "n_head": 6, "dropout": 0.0, "bias": False})
    ours = TritonAttention(mcfg, OmegaConf.create({"name": "triton", "cpp_launch": cpp_launch})).cuda().bfloat16()
    ref = SDPAAttention(mcfg, OmegaConf.create({"name": "sdpa"})).cuda().bfloat16()
    ref.load_state_dict(ours.state_dict())
    torch.manual_seed(0)
    x = torch.randn(8, 256, 384, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    xs = [x.clone().requires_grad_() for _ in range(2)]
    outs = [m.branch(t) for m, t in zip((ours, ref), xs)]
    outs[1].backward(dy)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        outs[0].backward(dy)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if on_device(e)]
    assert not [n for n in names if "CatArrayBatchedCopy" in n], names
    rel = lambda a, b: ((a.float() - b.float()).norm() / b.float().norm()).item()  # noqa: E731
    assert rel(xs[0].grad, xs[1].grad) < BF16_TOL
    assert rel(ours.c_attn.weight.grad, ref.c_attn.weight.grad) < BF16_TOL


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_ieee_fp32():
    """allow_tf32=False at 1e-4, one forced config each way: IEEE fp32 kernels compile slowly."""
    import kernels.triton_attention as ta
    ta.force_configs = [dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=s) for s in (1, 2)]
    try:
        errs = _helpers()["run_case"](ta, 3, 6, 255, 255, 64, "float32", True, "contiguous", False, "cuda")
    finally:
        ta.force_configs = None
    assert all(e <= FP32_TOL for e in errs.values()), errs


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_every_config(dtype):
    """Each tuned config, forced, at a ragged shape: the autotuner may pick any of them."""
    import triton

    import kernels.triton_attention as ta
    run_case, failed, ran = _helpers()["run_case"], [], 0
    tol = BF16_TOL if dtype == "bfloat16" else TF32_TOL
    for fwd in ta.FWD_CONFIGS:
        for bwd in ta.BWD_CONFIGS if fwd is ta.FWD_CONFIGS[0] else ta.BWD_CONFIGS[:1]:
            ta.force_configs = [dict(c.kwargs, num_warps=c.num_warps, num_stages=c.num_stages)
                                for c in (fwd, bwd)]
            try:
                errs = run_case(ta, 2, 3, 250, 250, 64, dtype, True, "contiguous", True, "cuda")
            except triton.runtime.errors.OutOfResources:
                continue  # the autotuner skips these too
            finally:
                ta.force_configs = None
            ran += 1
            if not all(e <= tol for e in errs.values()):
                failed.append((fwd, bwd, errs))
    assert ran and not failed, failed


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_dropout(dtype):
    """Fused dropout on the GPU (autotuned configs, T 64, D 64): as on CPU, against float64 under
    the kernel's own mask; the keep rate over 2 x 2 x 2,080 decisions."""
    import kernels.triton_attention as ta
    torch.manual_seed(0)
    errs, mask = _helpers()["dropout_case"](ta, 0.3, "cuda", getattr(torch, dtype), True, T=64, D=64)
    tol = BF16_TOL if dtype == "bfloat16" else TF32_TOL
    assert all(e <= tol for e in errs.values()), errs
    assert abs(mask["kept"] - 0.7) < 0.03 and abs(mask["changed"] - 0.42) < 0.04, mask


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_direct_launch_matches_jit():
    """After the first calls, kernels launch as CompiledKernels (no JIT): same bits as the JIT."""
    import kernels.triton_attention as ta
    import kernels.triton_launch as tl
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(4, 6, 100, 64, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    qkv = [t.detach().requires_grad_() for t in (q, k, v)]

    def run():
        for t in qkv:
            t.grad = None
        out = ta.attention(*qkv)
        out.backward(do)
        return [out.detach().clone()] + [t.grad.clone() for t in qkv]
    run()  # tune, compile
    before = dict(tl.stats)
    direct = [run() for _ in range(2)][-1]
    assert tl.fast and tl.stats["direct"] >= before["direct"] + 2, tl.stats  # fwd and bwd went direct
    tl.fast = False
    try:
        jit = run()
    finally:
        tl.fast = True
    assert all(torch.equal(a, b) for a, b in zip(direct, jit))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_training_tracks_sdpa():
    """60 steps of a small GPT (bf16 autocast) on a learnable pattern: triton's loss follows sdpa's."""
    from omegaconf import OmegaConf

    from transformerop.model import GPT
    mcfg = OmegaConf.create({"n_layer": 2, "n_head": 4, "n_embd": 128, "block_size": 64,
                             "dropout": 0.0, "bias": True})
    start = torch.randint(0, 65, (16, 1), generator=torch.Generator().manual_seed(0))
    data = ((start + 3 * torch.arange(65)) % 65).cuda()  # next token = this one + 3
    losses, first = {}, {}
    for name in ("sdpa", "triton"):
        torch.manual_seed(0)
        model = GPT(mcfg, OmegaConf.create({"name": name}), 65).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for _ in range(60):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                _, loss = model(data[:, :-1], data[:, 1:])
            opt.zero_grad()
            loss.backward()
            opt.step()
            first.setdefault(name, loss.item())
        losses[name] = loss.item()
    assert losses["triton"] < 0.5 * first["triton"], (first, losses)  # it learned
    assert abs(losses["triton"] - losses["sdpa"]) < 0.05 * losses["sdpa"] + 0.05, losses


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_timing_table():
    """B 64, H 6, T 256, D 64 causal: correct first, then median µs of ours vs SDPA. `cold` is
    do_bench (L2 flushed each rep; a slow host launch path shows here), `graph` a CUDA-graph
    replay (GPU time only, warm L2). Run with -s to see the table; asserts correctness only."""
    import torch.nn.functional as F
    from triton.testing import do_bench, do_bench_cudagraph

    import kernels.triton_attention as ta
    h = _helpers()
    B, H, T, D = 64, 6, 256, 64
    impls = {"triton": ta.attention, "sdpa": lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True)}
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(0)
        q, k, v, do = (torch.randn(B, H, T, D, device="cuda", dtype=dtype) for _ in range(4))
        qkv = [t.detach().requires_grad_() for t in (q, k, v)]
        ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
        ref = h["reference"](*ref_in)
        ref.backward(do.double())
        for _ in range(3):  # tune + compile, then the tuned-config path that timing uses
            out = ta.attention(*qkv)
            for t in qkv:
                t.grad = None
            out.backward(do)
        errs = [h["rel_err"](out, ref)] + [h["rel_err"](a.grad, b.grad) for a, b in zip(qkv, ref_in)]
        assert max(errs) <= (BF16_TOL if dtype == torch.bfloat16 else TF32_TOL), errs
        for name, fn in impls.items():
            def fwd():
                return fn(q, k, v)

            def fwd_bwd():
                fn(*qkv).backward(do)
            t = [do_bench(fwd, warmup=100, rep=300, return_mode="median") for _ in range(2)]
            t.append(do_bench_cudagraph(fwd, rep=100, return_mode="median"))
            t += [do_bench(fwd_bwd, warmup=100, rep=300, return_mode="median", grad_to_none=qkv) for _ in range(2)]
            # Fresh leaves: their AccumulateGrad nodes are then made on the capture stream, not the default one.
            fresh = [t.detach().requires_grad_() for t in qkv]
            t.append(do_bench_cudagraph(lambda: fn(*fresh).backward(do), rep=100, return_mode="median", grad_to_none=fresh))
            rows.append((str(dtype)[6:], name, *(1e3 * x for x in t), max(errs) if name == "triton" else None))
    import kernels.triton_launch as tlaunch
    for key, cfg in tlaunch._tuned.items():
        if key[3:5] == (256, 256) and key[5] == 64:
            print("tuned", key[0], key[2], cfg)
    print("\nB64 H6 T256 D64 causal, median us; fp32 triton uses TF32 (SDPA fp32 does not)")
    print(f"{'dtype':9}{'impl':7}{'fwd cold':>9}{'again':>7}{'graph':>7}{'f+b cold':>9}{'again':>7}{'graph':>7}  max rel err")
    for r in rows:
        print(f"{r[0]:9}{r[1]:7}" + "".join(f"{x:{w}.1f}" for x, w in zip(r[2:8], (9, 7, 7, 9, 7, 7)))
              + (f"  {r[8]:.1e}" if r[8] is not None else ""))


def test_triton_model_deep_copies_for_the_float64_reference():
    """The bench's correctness gate copies the model to float64 (copy.deepcopy): a backend must
    hold no module objects (the H200 run of attention_end_to_end failed on exactly this)."""
    from conftest import make_cfg

    from transformerop.measure.reference import float64_model
    from transformerop.model import build_model
    m = build_model(make_cfg("model.n_layer=1", "model.n_head=2", "model.n_embd=32", "model.block_size=16",
                             "attention=triton"), 65)
    ref = float64_model(m)
    assert next(ref.parameters()).dtype == torch.float64 and ref.blocks[0].attn.attend is not m.blocks[0].attn.attend


def test_launch_path_integer_math_matches_tritons_helpers():
    """The launch path's own power-of-two bucket and ceiling division, against Triton's."""
    import triton

    from kernels.triton_attention import _bucket, _cdiv
    assert [_bucket(t) for t in range(4100)] == [triton.next_power_of_2(max(t, 1)) for t in range(4100)]
    assert all(_cdiv(a, b) == triton.cdiv(a, b) for a in range(1100) for b in (16, 32, 64, 128))
