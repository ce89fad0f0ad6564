"""transformerop.optim.AdamW against an independent float64 AdamW formula and against
torch.optim.AdamW(fused=True), and the start-up cost it exists to avoid (no torch._dynamo)."""
import copy
import math
import subprocess
import sys

import pytest
import torch

from transformerop.optim import AdamW


def adamw_float64(params, grads_per_step, lr, betas, eps, wds):
    """AdamW (Loshchilov & Hutter, decoupled decay) written out in float64, one tensor at a time."""
    b1, b2 = betas
    ps = [p.detach().double().clone() for p in params]
    m = [torch.zeros_like(p) for p in ps]
    v = [torch.zeros_like(p) for p in ps]
    for t, grads in enumerate(grads_per_step, start=1):
        for i, (p, g) in enumerate(zip(ps, grads)):
            g = g.double()
            p.mul_(1 - lr * wds[i])
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            m_hat, v_hat = m[i] / (1 - b1 ** t), v[i] / (1 - b2 ** t)
            p.sub_(lr * m_hat / (v_hat.sqrt() + eps))
    return ps


def _setup(seed=0):
    gen = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(8, 5, generator=gen)), torch.nn.Parameter(torch.randn(5, generator=gen))]
    grads = [[torch.randn(p.shape, generator=gen) for p in params] for _ in range(4)]
    return params, grads


def _run(opt, params, grads):
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = g.clone()
        opt.step()
        opt.zero_grad(set_to_none=True)


@pytest.mark.parametrize("lr", [1e-3, torch.tensor(1e-3)], ids=["float_lr", "tensor_lr"])
def test_matches_float64_formula(lr):
    params, grads = _setup()
    ref = adamw_float64(params, grads, 1e-3, (0.9, 0.99), 1e-8, [0.1, 0.0])
    opt = AdamW([{"params": [params[0]], "weight_decay": 0.1}, {"params": [params[1]], "weight_decay": 0.0}],
                lr=lr, betas=(0.9, 0.99))
    _run(opt, params, grads)
    for p, r in zip(params, ref):
        err = ((p.detach().double() - r).abs().max() / r.abs().max()).item()
        assert err < 1e-6, err


def test_planted_fault_is_caught():
    """The float64 comparison can fail: decay on the 1-D group (which the trainer never decays)
    moves the result well past the tolerance the test above holds."""
    params, grads = _setup()
    ref = adamw_float64(params, grads, 1e-3, (0.9, 0.99), 1e-8, [0.1, 0.0])
    opt = AdamW([{"params": params, "weight_decay": 0.1}], lr=1e-3, betas=(0.9, 0.99))
    _run(opt, params, grads)
    err = ((params[1].detach().double() - ref[1]).abs().max() / ref[1].abs().max()).item()
    assert err > 1e-6


def test_bit_identical_to_torch_fused_adamw_and_state_dict_round_trip():
    params, grads = _setup(1)
    theirs_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    ours = AdamW([{"params": params, "weight_decay": 0.1}], lr=1e-3, betas=(0.9, 0.99))
    theirs = torch.optim.AdamW(theirs_params, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1, fused=True)
    _run(ours, params, grads)
    _run(theirs, theirs_params, grads)
    for a, b in zip(params, theirs_params):
        assert torch.equal(a, b)
    sd = ours.state_dict()
    assert sd["param_groups"][0]["params"] == [0, 1] and math.isclose(sd["param_groups"][0]["lr"], 1e-3)
    fresh = AdamW([{"params": [torch.nn.Parameter(p.detach().clone()) for p in params], "weight_decay": 0.1}],
                  lr=1e-3, betas=(0.9, 0.99))
    fresh.load_state_dict(theirs.state_dict())
    for p, q in zip(fresh.param_groups[0]["params"], theirs_params):
        assert torch.equal(fresh.state[p]["exp_avg_sq"], theirs.state[q]["exp_avg_sq"])
    back = [torch.nn.Parameter(p.detach().clone()) for p in params]  # and the other way round
    torch_again = torch.optim.AdamW(back, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1, fused=True)
    torch_again.load_state_dict(copy.deepcopy(ours.state_dict()))  # as through a checkpoint file
    _run(ours, params, grads[:1])
    _run(torch_again, back, grads[:1])
    for a, b in zip(params, back):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="parameter groups of sizes"):
        AdamW([{"params": params[:1]}], lr=1e-3).load_state_dict(sd)


def test_building_the_trainer_optimizer_does_not_import_dynamo():
    code = ("import sys, torch\n"
            "from transformerop.optim import AdamW\n"
            "p = torch.nn.Parameter(torch.ones(2)); o = AdamW([{'params': [p]}], lr=1e-3)\n"
            "p.grad = torch.ones(2); o.step(); o.zero_grad()\n"
            "torch.nn.utils.clip_grad_norm_([p], 1.0)\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
