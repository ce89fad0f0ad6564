"""model.fused_norm: the residual add + dropout + LayerNorm kernels (kernels/triton_norm.py)
against float64 formulas written here, forward and backward, with and without residual, bias
and dropout; the fused GPT's gradients against its float64 copy; a planted 1% error in the
kernel's backward that the gradient gate's measure must catch; the column sums that finish the
weight gradients against float64 sums.

CPU: under TRITON_INTERPRET=1 in one subprocess (the variable must be set before triton is
imported), fp32 only (the interpreter has no bf16). GPU: bf16 at the seed's training shape."""
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

CHECKS = r'''
import json, sys
import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from kernels import triton_norm as TN
from transformerop.measure.reference import float64_model, norm_rel_err

dev = torch.device(sys.argv[1]); dt = getattr(torch, sys.argv[2]); N_ROWS, C = int(sys.argv[3]), int(sys.argv[4])
out = {"shape": [N_ROWS, C]}


def formula(x, br, w, b, keep, p, eps):
    """float64: h = x + br * keep / (1 - p); y = (h - mean) / sqrt(var + eps) * w + b."""
    h = br * keep / (1 - p) + (x if x is not None else 0)
    mean = h.mean(-1, keepdim=True)
    var = ((h - mean) ** 2).mean(-1, keepdim=True)
    y = (h - mean) / torch.sqrt(var + eps) * w
    return h, (y + b if b is not None else y)


def rel(a, r):
    return ((a.double() - r).abs().max() / r.abs().max()).item()


torch.manual_seed(0)
for res in (True, False):
    for bias in (True, False):
        for p in (0.0, 0.3):
            ln = torch.nn.LayerNorm(C, bias=bias).to(dev)
            with torch.no_grad():
                ln.weight.normal_()
                if bias:
                    ln.bias.normal_()
            x = torch.randn(N_ROWS, C, device=dev, requires_grad=True) if res else None
            br = torch.randn(N_ROWS, C, device=dev).to(dt).requires_grad_()
            seed = torch.tensor([1234], device=dev) if p else None
            h, y = TN.add_norm(x, br, ln, p, seed, out_dtype=dt)
            keep = ((h - (x if res else 0)).detach() != 0).double() if p else torch.ones(N_ROWS, C, device=dev).double()
            leaves = [t.detach().double().requires_grad_() for t in (x, br, ln.weight, ln.bias) if t is not None]
            it = iter(leaves)
            x64 = next(it) if res else None
            br64, w64 = next(it), next(it)
            b64 = next(it) if bias else None
            h64, y64 = formula(x64, br64, w64, b64, keep, p, ln.eps)
            dh, dy = torch.randn_like(h), torch.randn_like(y)
            ins = [t for t in (x, br, ln.weight, ln.bias) if t is not None]
            got = torch.autograd.grad((h * dh).sum() + (y.float() * dy.float()).sum(), ins)
            ref = torch.autograd.grad((h64 * dh.double()).sum() + (y64 * dy.double()).sum(), leaves)
            name = f"res{int(res)}_bias{int(bias)}_p{p}"
            out[name] = {"h": rel(h, h64), "y": rel(y, y64), "keep": keep.mean().item(),
                         "grads": [norm_rel_err(g, r) for g, r in zip(got, ref)]}

# a stream in the branch's dtype (model.stream_dtype=bfloat16 on a GPU): it stays in it, forward
# and backward; a stream that starts (x None) takes `start`, whatever the branch's dtype
x = torch.randn(N_ROWS, C, device=dev).to(dt).requires_grad_()
br = torch.randn(N_ROWS, C, device=dev).to(dt).requires_grad_()
ln = torch.nn.LayerNorm(C).to(dev)
h, y = TN.add_norm(x, br, ln, 0.0, None, out_dtype=dt)
h0, _ = TN.add_norm(None, torch.randn(N_ROWS, C, device=dev), ln, 0.0, None, out_dtype=dt, start=dt)
x64, br64 = x.detach().double().requires_grad_(), br.detach().double().requires_grad_()
h64, y64 = formula(x64, br64, ln.weight.detach().double(), ln.bias.detach().double(), 1.0, 0.0, ln.eps)
dh, dy = torch.randn_like(h), torch.randn_like(y)
got = torch.autograd.grad((h.float() * dh.float()).sum() + (y.float() * dy.float()).sum(), (x, br))
ref = torch.autograd.grad((h64 * dh.double()).sum() + (y64 * dy.double()).sum(), (x64, br64))
out["stream"] = {"dtypes": [str(t.dtype) for t in (h, h0, got[0], got[1])], "expected": str(dt), "h": rel(h, h64),
                 "y": rel(y, y64), "grads": [norm_rel_err(g, r) for g, r in zip(got, ref)]}

# seeds: a new seed is a new mask; the same seed the same mask
ln = torch.nn.LayerNorm(C).to(dev)
br = torch.ones(N_ROWS, C, device=dev, dtype=dt)
masks = [(TN.add_norm(None, br, ln, 0.5, torch.tensor([s], device=dev))[0] != 0) for s in (1, 1, 2)]
out["same_seed_same_mask"] = bool(torch.equal(masks[0], masks[1]))
out["new_seed_new_mask"] = float((masks[0] != masks[2]).float().mean())
out["mask_bits"] = np.packbits(masks[0].cpu().numpy()).tobytes().hex()  # seed 1, p 0.5: for the formula check

# the fused GPT against its float64 copy, and a planted fault in the kernel's backward
m = OmegaConf.create(dict(name="gpt", n_layer=2, n_head=2, n_embd=C, block_size=16, dropout=0.2, bias=True,
                          fused_norm=True))
from transformerop.model.gpt import GPT
torch.manual_seed(0)
model = GPT(m, OmegaConf.create(dict(name="sdpa")), 11).to(dev).eval()
idx, tgt = torch.randint(0, 11, (2, 16), device=dev), torch.randint(0, 11, (2, 16), device=dev)


def worst_grad_err():
    ref = float64_model(model)
    model.zero_grad(set_to_none=True)
    model(idx, tgt)[1].backward()
    ref(idx, tgt)[1].backward()
    return max(norm_rel_err(p.grad, r.grad) for p, r in zip(model.parameters(), ref.parameters()))


out["model_grad_err"] = worst_grad_err()
real = TN.AddNormFn.backward


def planted(ctx, dh, dy):
    g = list(real(ctx, dh, dy))
    g[1] = g[1] * 1.01  # the branch's gradient 1% off
    return tuple(g)


TN.AddNormFn.backward = staticmethod(planted)
out["planted_grad_err"] = worst_grad_err()
TN.AddNormFn.backward = real

# training mode: every kernel's dropout on (seeds drawn per forward), gradients everywhere
model.train()
losses = []
for _ in range(2):
    model.zero_grad(set_to_none=True)
    loss = model(idx, tgt)[1]
    loss.backward()
    losses.append(loss.item())
out["train_grads"] = all(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in model.parameters())
out["train_losses_differ"] = losses[0] != losses[1]  # new masks every forward
# weights cast as decoding casts them (no autocast): the normed outputs follow the weights' dtype
import copy
low = torch.bfloat16 if dev.type == "cuda" else torch.float16
cast = copy.deepcopy(model).eval().to(low)
out["cast_logits_dtype"] = str(cast(idx)[0].dtype)
out["cast_expected_dtype"] = str(low)
# the partial sums' finish: several row blocks (their atomics) and a last column block cut short
part = torch.randn(3 * TN.SUM_ROWS + 5, TN.SUM_COLS + 44, device=dev)
out["column_sums"] = norm_rel_err(TN._finish(part), part.double().sum(0))
print("RESULT " + json.dumps(out))
'''


def _run(env_extra, *args):
    from conftest import script_result
    return script_result(CHECKS, env_extra, *args)


def _assert(out, tol, grad_tol, gate_tol):
    for name, r in ((k, v) for k, v in out.items() if k.startswith("res")):
        assert r["h"] < tol and r["y"] < tol, (name, r)
        assert all(e < grad_tol for e in r["grads"]), (name, r["grads"])
        if "p0.3" in name:
            assert 0.6 < r["keep"] < 0.8, (name, r["keep"])  # keep rate 1 - p
    s = out["stream"]
    assert s["dtypes"] == [s["expected"]] * 4 and s["h"] < tol and s["y"] < tol, s
    assert all(e < grad_tol for e in s["grads"]), s
    assert out["same_seed_same_mask"] and 0.3 < out["new_seed_new_mask"] < 0.7
    # the kernel's decisions are those of tests/test_dropout_hash.py's formula (row, column, seed 1)
    from test_dropout_hash import formula, unpack
    n_rows, C = out["shape"]
    assert np.array_equal(unpack(out["mask_bits"], n_rows, C), formula(1, 0, n_rows, C, 0.5))
    assert out["model_grad_err"] < gate_tol
    assert out["planted_grad_err"] > gate_tol  # the gate's measure sees a 1% error in one gradient
    assert out["train_grads"] and out["train_losses_differ"]
    assert out["cast_logits_dtype"] == out["cast_expected_dtype"]
    assert out["column_sums"] < 1e-6


def test_fused_norm_kernels_under_the_interpreter():
    from transformerop.measure.reference import GRAD_TOLERANCE
    out = _run({"TRITON_INTERPRET": "1"}, "cpu", "float32", "37", "48")
    _assert(out, 1e-5, 1e-5, GRAD_TOLERANCE["ieee"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("n_rows, C", [(16384, 384), (3001, 768)])
def test_fused_norm_kernels_bf16_on_the_gpu(n_rows, C):
    """16,384 rows x 384 (B 64 x T 256, the seed's width), then a wider model's 768 over rows that
    fill no whole tile: bf16 branch and output, fp32 stream."""
    out = _run({}, "cuda", "bfloat16", str(n_rows), str(C))
    # bf16 rounding of the branch and the output; grads through bf16 outputs
    _assert(out, 2e-2, 2e-2, 5e-3)


TINY = ["data=shakespeare", "model=gpt", "data.file=sample_play.txt", "data.url=null",
        "data.sha256=9a40396c5ca5a1c76160dd51e7f0cf3f443787c5d53dc627eca9ba85f8b41bfe", "model.n_layer=1",
        "model.n_embd=32", "model.n_head=2", "model.block_size=16", "train.max_iters=4", "train.eval_interval=2",
        "train.eval_iters=1", "train.batch_size=2", "train.sample_tokens=4", "train.progress=false", "logger=none",
        "model.fused_norm=true", "train.dtype=float32"]


def test_fused_norm_through_the_cli(tmp_path):
    """Without a GPU (and no interpreter) the job is refused in one line before any run dir;
    under the interpreter the same command trains, evaluates and samples through the kernels."""
    from conftest import results, run_cli
    refused = run_cli(*TINY, f"hydra.run.dir={tmp_path / 'cpu'}", env={"TRITON_INTERPRET": "0"})
    assert refused.returncode == 3, refused.stderr[-2000:]
    assert refused.stderr.strip().splitlines()[-1].startswith("skipped: model.fused_norm=true needs a CUDA GPU")
    assert not (tmp_path / "cpu").exists()
    ok = run_cli(*TINY, f"hydra.run.dir={tmp_path / 'interpreted'}", env={"TRITON_INTERPRET": "1"})
    assert ok.returncode == 0, ok.stderr[-3000:]
    r = results(tmp_path / "interpreted")
    assert r["status"] == "ok" and r["metrics"]["steps"] == 4 and 0 < r["metrics"]["val_loss"] < 10


ATOMIC = r'''
import json
import torch
from kernels import triton_norm as TN
torch.manual_seed(0)
n, C, p = 37, 48, 0.3
x, br, dy, dh = (torch.randn(n, C) for _ in range(4))
w, b, seed = torch.randn(C), torch.randn(C), torch.tensor([7])
h, y, mean, rstd = TN._forward(x, br, w, b, seed, p, 1e-5, torch.float32, torch.float32)
# float64: dw = sum over rows of dy * xhat, db = sum of dy
h64 = h.double()
xhat = (h64 - h64.mean(-1, keepdim=True)) / torch.sqrt(h64.var(-1, unbiased=False, keepdim=True) + 1e-5)
want = {"dw": (dy.double() * xhat).sum(0), "db": dy.double().sum(0)}
out = {}
for atomic in (False, True):
    TN.BWD_ATOMIC_DW = atomic
    dx, dbr, dw, db = TN._backward(dy, dh, h, w, b, mean, rstd, seed, p, torch.float32, torch.float32)
    out[str(atomic)] = {"dw": ((dw.double() - want["dw"]).abs().max() / want["dw"].abs().max()).item(),
                        "db": ((db.double() - want["db"]).abs().max() / want["db"].abs().max()).item(),
                        "dx": dx.tolist(), "dbr": dbr.tolist()}
print("RESULT " + json.dumps(out))
'''


def test_backward_dw_by_atomics_under_the_interpreter():
    """The backward's dw and db added by fp32 atomics into one row (the option the tile sweep weighs)
    against a float64 formula, and dx and the branch's gradient unchanged by the option."""
    from conftest import script_result
    out = script_result(ATOMIC, {"TRITON_INTERPRET": "1"})
    for r in out.values():
        assert r["dw"] < 1e-6 and r["db"] < 1e-6, r
    assert out["True"]["dx"] == out["False"]["dx"] and out["True"]["dbr"] == out["False"]["dbr"]
