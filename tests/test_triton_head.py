"""model.fused_head: the tied head + cross-entropy kernels (kernels/triton_head.py) against a
float64 formula written here -- the mean loss over scored targets and the gradients of x and of
the weight -- at row counts and widths that leave partial tiles, with unscored (-1) targets; a
planted 1% error in the backward must be caught; the model's loss and gradients with it against
its float64 copy. CPU: under TRITON_INTERPRET=1 (fp32). GPU: bf16 at the seed's training shape."""
import pytest
import torch

CHECKS = r'''
import json, sys
import torch
from omegaconf import OmegaConf
from kernels import triton_head as TH
from transformerop.measure.reference import float64_model, norm_rel_err

dev, dt = torch.device(sys.argv[1]), getattr(torch, sys.argv[2])
out = {}


def formula(x, w, tgt):
    """float64: mean over scored rows of logsumexp(x w^T) - (x w^T)[target]."""
    z = x.double() @ w.double().t()
    scored = tgt >= 0
    picked = z.gather(1, tgt.clamp_min(0)[:, None])[:, 0]
    return ((torch.logsumexp(z, 1) - picked) * scored).sum() / scored.sum()


def case(n, C, V, unscored):
    torch.manual_seed(n + C + V)
    x = torch.randn(n, C, device=dev).to(dt).requires_grad_()
    w = (0.3 * torch.randn(V, C, device=dev)).requires_grad_()
    tgt = torch.randint(0, V, (n,), device=dev)
    tgt[torch.rand(n, device=dev) < unscored] = -1
    loss = TH.head_loss(x, w, tgt)
    gx, gw = torch.autograd.grad(loss, (x, w))
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    ref = formula(x64, w64, tgt)
    rx, rw = torch.autograd.grad(ref, (x64, w64))
    return {"loss": abs(loss.item() - ref.item()) / abs(ref.item()), "dx": norm_rel_err(gx, rx),
            "dw": norm_rel_err(gw, rw), "dtypes": [str(loss.dtype), str(gx.dtype), str(gw.dtype)]}


n_rows = int(sys.argv[3])
for n, C, V, unscored in ((n_rows, int(sys.argv[4]), 65, 0.0), (n_rows + 37, 48, 11, 0.3), (70, 40, 130, 0.1)):
    out[f"n{n}_C{C}_V{V}"] = case(n, C, V, unscored)

real = TH._backward


def planted(*args):  # the weight's gradient 1% off
    dx, dw = real(*args)
    return dx, dw * 1.01


TH._backward = planted
out["planted"] = case(n_rows, int(sys.argv[4]), 65, 0.0)
TH._backward = real

# the model with it: loss and every gradient against its float64 copy (which keeps the plain head)
m = OmegaConf.create(dict(name="gpt", n_layer=1, n_head=2, n_embd=32, block_size=16, dropout=0.0, bias=False,
                          fused_head=True))
from transformerop.model.gpt import GPT
torch.manual_seed(0)
model = GPT(m, OmegaConf.create(dict(name="sdpa")), 11).to(dev).eval()
idx, tgt = torch.randint(0, 11, (3, 16), device=dev), torch.randint(0, 11, (3, 16), device=dev)
ref = float64_model(model)
logits, loss = model(idx, tgt)
loss.backward()
_, ref_loss = ref(idx, tgt)
ref_loss.backward()
out["model"] = {"logits": logits is None, "ref_fused": ref.fused_head,
                "loss": abs(loss.item() - ref_loss.item()) / ref_loss.item(), "loss_values": [loss.item(), ref_loss.item()],
                "grad": max(norm_rel_err(p.grad, r.grad) for p, r in zip(model.parameters(), ref.parameters())),
                "plain_logits": list(model(idx)[0].shape)}
print("RESULT " + json.dumps(out))
'''


def _run(env, *args):
    from conftest import script_result
    return script_result(CHECKS, env, *args)


def _assert(out, tol, grad_tol, dtype):
    cases = {k: v for k, v in out.items() if k.startswith("n")}
    assert len(cases) == 3
    for name, r in cases.items():
        assert r["loss"] < tol and r["dx"] < grad_tol and r["dw"] < grad_tol, (name, r)
        assert r["dtypes"] == ["torch.float32", dtype, "torch.float32"], (name, r)
    # the planted 1% shows above the case's own rounding (same inputs as the first case)
    first = cases[next(iter(cases))]
    assert out["planted"]["dw"] > first["dw"] + 5e-3, (out["planted"], first)
    mo = out["model"]
    assert mo["logits"] and not mo["ref_fused"] and mo["plain_logits"] == [3, 16, 11], mo
    assert mo["loss"] < tol * 10 and mo["grad"] < grad_tol * 10, mo


def test_fused_head_under_the_interpreter():
    out = _run({"TRITON_INTERPRET": "1"}, "cpu", "float32", "150", "96")
    _assert(out, 1e-6, 1e-5, "torch.float32")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fused_head_bf16_at_the_seed_shape():
    """16,384 rows x 384 (B 64 x T 256), vocabulary 65: bf16 x, fp32 weight (as under autocast)."""
    out = _run({}, "cuda", "bfloat16", "16384", "384")
    _assert(out, 5e-3, 2e-2, "torch.bfloat16")


def test_fused_head_through_the_cli(tmp_path):
    """Without a GPU (and no interpreter) the job is skipped in one line before any run dir; under
    the interpreter it trains, evaluates on the whole val split and samples (the sample reads the
    plain head's logits)."""
    from conftest import results, run_cli
    from test_triton_norm import TINY
    args = [a for a in TINY if a != "model.fused_norm=true"] + ["model.fused_head=true"]
    refused = run_cli(*args, f"hydra.run.dir={tmp_path / 'cpu'}", env={"TRITON_INTERPRET": "0"})
    assert refused.returncode == 3, refused.stderr[-2000:]
    assert refused.stderr.strip().splitlines()[-1].startswith("skipped: model.fused_head=true needs a CUDA GPU")
    assert not (tmp_path / "cpu").exists()
    ok = run_cli(*args, f"hydra.run.dir={tmp_path / 'interpreted'}", env={"TRITON_INTERPRET": "1"})
    assert ok.returncode == 0, ok.stderr[-3000:]
    m = results(tmp_path / "interpreted")["metrics"]
    assert m["steps"] == 4 and 0 < m["val_loss"] < 10


@pytest.mark.parametrize("vp", [128, 256])
def test_the_head_kernels_compile_for_the_h200_without_spills(vp, tmp_path):
    """conftest.compile_for_h200 (no GPU needed) of both kernels in bf16 at each vocabulary tile,
    at the launch's warps and stages: what the interpreter lets through (dot shapes, dtypes) must
    also build for sm_90, and ptxas must hold each thread's values in registers."""
    import re

    from conftest import compile_for_h200
    from test_gluon_attention import _ptxas_info

    from kernels import triton_head as TH
    const = {"BLOCK_M": TH.BLOCK_M, "VP": vp, "BK": TH.BK, "PREC": "tf32"}
    types = {"X": "*bf16", "W": "*fp32", "TGT": "*i64", "LSE": "*fp32", "PART": "*fp32", "SCALE": "*fp32",
             "DX": "*bf16", "G": "*bf16"}
    for kernel in (TH._head_fwd, TH._head_bwd):
        sig = {n: "constexpr" if n in const else types.get(n, "i32") for n in kernel.arg_names}
        compiled = compile_for_h200(kernel, sig, const, {"num_warps": TH.WARPS, "num_stages": TH.STAGES})
        assert "mma" in compiled.asm["ptx"]  # the logits on the tensor cores
        info = _ptxas_info(compiled.asm["ptx"], tmp_path)
        spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", info)]
        assert spills and max(spills) == 0, info
