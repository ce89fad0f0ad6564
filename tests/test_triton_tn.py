"""kernels/triton_tn.py: a^T b and one_hot(idx)^T b for tall, narrow operands against float64 sums
written here (index_add for the one-hot, a float64 matmul otherwise); a one-token fault that the
tolerance must see; what the kernel declines.

CPU: under TRITON_INTERPRET=1 in one subprocess, fp16 operands (the interpreter's bf16 dot is not
bf16's). GPU: the tied embedding's two products at the seed's step (16,384 tokens, 65 x 384): the
one-hot against an fp32 gradient spread over many binades (the three-term bf16 split), bf16 and
fp16 ones, and the head's bf16 g^T x."""
import pytest
import torch

CHECKS = r'''
import json, sys
import torch
from kernels.triton_tn import tn

dev = torch.device(sys.argv[1]); n, R, C = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
dtypes = [getattr(torch, d) for d in sys.argv[5].split(",")]
torch.manual_seed(0)
out = {}


def rel(got, want):
    return ((got.double() - want).abs().max() / want.abs().max()).item()


idx = torch.randint(0, R, (n,), device=dev)
for dt in dtypes:
    spread = torch.exp(torch.randn(n, C, device=dev) * (4.0 if dt == torch.float32 else 1.0))
    g = (torch.randn(n, C, device=dev) * spread).to(dt)
    want = torch.zeros(R, C, dtype=torch.float64, device=dev).index_add_(0, idx, g.double())
    got = tn(None, g, idx=idx, R=R)
    out[f"one_hot_{dt}"] = {"err": rel(got, want), "dtype": str(got.dtype), "shape": list(got.shape)}
    moved = idx.clone()
    moved[n // 2] = (moved[n // 2] + 1) % R  # one token's id changed: a fault the tolerance must see
    out[f"one_hot_{dt}"]["fault"] = rel(tn(None, g, idx=moved, R=R), want)
    if dt != torch.float32:
        a = torch.randn(n, R, device=dev).to(dt)
        want = a.double().t() @ g.double()
        out[f"dense_{dt}"] = {"err": rel(tn(a, g), want)}
        a[n - 1] = 0  # the last token's row of a left out
        out[f"dense_{dt}"]["fault"] = rel(tn(a, g), want)
# ids outside [0, R) add nothing
far = torch.full((n,), R, device=dev)
out["outside"] = tn(None, torch.ones(n, C, device=dev).to(dtypes[0]), idx=far, R=R).abs().max().item()
print("RESULT " + json.dumps(out))
'''


def _check(out, tol):
    for name, r in out.items():
        if name == "outside":
            assert r == 0.0
            continue
        assert r["err"] < tol, (name, r)
        assert r["fault"] > 10 * tol, (name, r)  # one token's contribution is visible
        if "shape" in r:
            assert r["dtype"] == "torch.float32" and r["shape"][0] > 0


def test_tn_under_the_interpreter():
    """1,000 tokens (not a whole number of programs), R 65 (padded to 128), C 200 (a last column
    block cut short)."""
    from conftest import script_result
    out = script_result(CHECKS, {"TRITON_INTERPRET": "1"}, "cpu", "1000", "65", "200", "float16")
    assert set(out) == {"one_hot_torch.float16", "dense_torch.float16", "outside"}
    _check(out, 1e-6)


def test_three_bf16_terms_make_any_fp32_exactly():
    """The split the kernel makes of an fp32 b (b1 = bf16(b), b2 = bf16(b - b1), b3 = bf16(b - b1 - b2)),
    here with torch's rounding: their sum is b to the last bit over a wide range of magnitudes, and two
    terms are not enough."""
    torch.manual_seed(0)
    b = torch.randn(1 << 16) * torch.exp(torch.randn(1 << 16) * 8.0)
    b1 = b.bfloat16().float()
    rest = b - b1
    b2 = rest.bfloat16().float()
    b3 = (rest - b2).bfloat16().float()
    assert torch.equal(b1 + b2 + b3, b)
    assert not torch.equal(b1 + b2, b)


def test_tn_declines_what_it_cannot_take():
    from kernels.triton_tn import MAX_R, supports
    assert supports(None, torch.float32, 65, True) and supports(torch.bfloat16, torch.bfloat16, 65, False)
    assert not supports(torch.float32, torch.float32, 65, False)  # fp32 a: split_k.t_matmul
    assert not supports(torch.bfloat16, torch.float16, 65, False)
    assert not supports(None, torch.float32, MAX_R + 1, True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("n, R, C", [(16384, 65, 384), (5001, 200, 768), (777, 11, 96)])
def test_tn_on_the_gpu(n, R, C):
    """The seed's step, then a wider model's (R past one 128-row tile, C 768) and a small one."""
    from conftest import script_result
    out = script_result(CHECKS, {}, "cuda", str(n), str(R), str(C), "float32,bfloat16,float16")
    assert len(out) == 6
    _check(out, 1e-5)
