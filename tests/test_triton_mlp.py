"""model.fused_mlp: GELU inside the MLP's matmul kernels (kernels/triton_mlp.py) against a float64
formula written here, forward and every gradient, with and without biases, at shapes that are
not multiples of the tiles (a width of 8k: the kernels' TMA rows are 16-byte aligned); the fused
GPT's gradients against its float64 copy (whose MLPs must be PyTorch's); a planted error in one
term of GELU's derivative inside the kernel (5% in fp32, 2x in bf16, whose gate is looser), which
the gradient gate's measure must catch; the kernel compiles for sm_90 (no GPU needed).

CPU: under TRITON_INTERPRET=1 in one subprocess, fp32. GPU: bf16 at the seed's training shape."""
import pytest
import torch

CHECKS = r'''
import json, math, sys
import torch
from omegaconf import OmegaConf
from kernels import triton_mlp as TM
from transformerop.measure.reference import float64_model, norm_rel_err
from transformerop.model import build_model

dev = torch.device(sys.argv[1]); dt = getattr(torch, sys.argv[2]); M, C = int(sys.argv[3]), int(sys.argv[4])
plant = float(sys.argv[5])
low = dt != torch.float32
out = {}


def formula(x, w1, b1, w2, b2):
    """float64: y = GELU(x W1^T + b1) W2^T + b2, GELU(u) = u / 2 (1 + erf(u / sqrt 2))."""
    pre = x @ w1.T + (b1 if b1 is not None else 0)
    return (0.5 * pre * (1 + torch.erf(pre / math.sqrt(2)))) @ w2.T + (b2 if b2 is not None else 0)


torch.manual_seed(0)
for bias in (True, False):
    fc, proj = torch.nn.Linear(C, 4 * C, bias=bias).to(dev), torch.nn.Linear(4 * C, C, bias=bias).to(dev)
    if bias:
        with torch.no_grad():
            fc.bias.normal_(), proj.bias.normal_()
    x = torch.randn(M, C, device=dev, requires_grad=True)
    with torch.autocast(dev.type, dtype=dt, enabled=low):
        y = TM.fused_mlp(x, fc, proj)
    g = torch.randn(y.shape, device=dev)
    ins = [t for t in (x, fc.weight, fc.bias, proj.weight, proj.bias) if t is not None]
    got = torch.autograd.grad((y.float() * g).sum(), ins)
    leaves = [t.detach().double().requires_grad_() for t in ins]
    w1, b1, w2, b2 = (leaves[1:] if bias else [leaves[1], None, leaves[2], None])
    ref = formula(leaves[0], w1, b1, w2, b2)
    want = torch.autograd.grad((ref * g.double()).sum(), leaves)
    out[f"bias{int(bias)}"] = {"y": norm_rel_err(y, ref), "y_dtype": str(y.dtype),
                               "grads": [norm_rel_err(a, b) for a, b in zip(got, want)],
                               "grad_dtypes": [str(a.dtype) == str(t.dtype) for a, t in zip(got, ins)]}

# the fused GPT against its float64 copy, then a planted error in the kernel's GELU derivative
m = OmegaConf.create(dict(model=dict(name="gpt", n_layer=2, n_head=1 if C % 2 else 2, n_embd=C, block_size=16, dropout=0.0,
                                     bias=True, fused_mlp=True), attention=dict(name="sdpa")))
model = build_model(m, 11, dev).eval()
out["reference_runs_pytorch_mlps"] = not any(b.mlp.fused for b in float64_model(model).blocks)
idx, tgt = torch.randint(0, 11, (2, 16), device=dev), torch.randint(0, 11, (2, 16), device=dev)


def worst_grad_err():
    ref = float64_model(model)
    model.zero_grad(set_to_none=True)
    with torch.autocast(dev.type, dtype=dt, enabled=low):
        loss = model(idx, tgt)[1]
    loss.backward()
    ref(idx, tgt)[1].backward()
    return max(norm_rel_err(p.grad, r.grad) for p, r in zip(model.parameters(), ref.parameters()))


out["model_grad_err"] = worst_grad_err()
TM.INV_SQRT_2PI = TM.tl.constexpr(TM.INV_SQRT_2PI.value * plant)
TM._fc_gelu_kernel = TM.triton.jit(TM._fc_gelu_kernel.fn)  # compiled Triton refuses a global changed under it
out["planted_grad_err"] = worst_grad_err()
print("RESULT " + json.dumps(out))
'''


def _run(env, *args):
    from conftest import script_result
    return script_result(CHECKS, env, *args)


def _assert(out, tol, grad_tol, gate_tol, y_dtype):
    for bias in ("bias0", "bias1"):
        r = out[bias]
        assert r["y"] < tol and all(e < grad_tol for e in r["grads"]), (bias, r)
        assert all(r["grad_dtypes"]), r  # each gradient in its input's dtype
        assert r["y_dtype"] == y_dtype, r  # the autocast dtype (bf16), else the input's
    assert out["reference_runs_pytorch_mlps"]
    assert out["model_grad_err"] < gate_tol
    assert out["planted_grad_err"] > gate_tol  # the gate's measure sees the kernel's derivative off


def test_fused_mlp_under_the_interpreter():
    from transformerop.measure.reference import GRAD_TOLERANCE
    out = _run({"TRITON_INTERPRET": "1"}, "cpu", "float32", "37", "24", "1.05")  # no dim a tile multiple
    _assert(out, 1e-6, 1e-6, GRAD_TOLERANCE["ieee"], "torch.float32")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fused_mlp_bf16_at_the_seed_shape():
    """16,384 rows x 384 (B 64 x T 256, the seed's width), under bf16 autocast."""
    from transformerop.measure.reference import GRAD_TOLERANCE
    out = _run({}, "cuda", "bfloat16", "16384", "384", "2.0")
    _assert(out, 1e-2, 1e-2, GRAD_TOLERANCE["bf16"], "torch.bfloat16")


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_the_kernel_compiles_for_the_h200(dtype):
    """conftest.compile_for_h200, both directions, at the GPU's tiles for the dtype."""
    from conftest import compile_for_h200

    from kernels import triton_mlp as TM
    for backward in (False, True):
        t = TM.tiles(torch.device("cuda"), torch.float32 if dtype == "fp32" else torch.bfloat16, backward)
        options = {"num_warps": t.pop("num_warps"), "num_stages": t.pop("num_stages")}
        const = {"HAS_BIAS": not backward, "BACKWARD": backward, "PRECISION": "ieee" if dtype == "fp32" else "tf32",
                 **t}
        BM, BN, BK = t["BM"], t["BN"], t["BK"]
        blocks = {"A": [BM, BK], "B": [BK, BN] if backward else [BN, BK], "PRE": [BM, BN], "OUT": [BM, BN]}
        sig = {n: "constexpr" if n in const else f"tensordesc<{dtype}{blocks[n]}>" if n in blocks else
               f"*{dtype}" if n == "BIAS" else "i32" for n in TM._fc_gelu_kernel.arg_names}
        compile_for_h200(TM._fc_gelu_kernel, sig, const, options)
