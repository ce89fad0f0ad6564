"""train.fused_step: the flat clip + AdamW kernels (kernels/triton_adamw.py) against a float64
AdamW written here, a wrong hyperparameter caught by the same comparison, and training with it
against training without it (CPU, bf16 autocast, under TRITON_INTERPRET=1), checkpoints included."""
import pytest
import torch

SCRIPT = r'''
import json, math, sys
import torch
from kernels import triton_adamw as TA
from transformerop.measure.reference import norm_rel_err
out = {}
torch.manual_seed(0)
B = TA.BLOCK
n = 3 * B
p, g, m = (torch.randn(n) * s for s in (0.02, 1e-3, 1e-4))
v = torch.rand(n) * 1e-6
decay = torch.tensor([1.0, 0.0, 1.0])
lr, step, coef, b1, b2, eps, wd = 3e-4, 5.0, 0.7, 0.9, 0.99, 1e-8, 0.1


def formula(p, g, m, v, b2=b2):
    """float64 AdamW (torch.optim.AdamW's update) on g * coef, decay per block."""
    p, g, m, v = (t.double() for t in (p, g, m, v))
    g = g * coef
    p = p * (1 - lr * wd * decay.double().repeat_interleave(B))
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    denom = v.sqrt() / math.sqrt(1 - b2 ** step) + eps
    return p - lr / (1 - b1 ** step) * m / denom, m, v


ref = formula(p, g, m, v)
wrong = formula(p, g, m, v, b2=0.98)
kp, km, kv, w16 = p.clone(), m.clone(), v.clone(), torch.zeros(n, dtype=torch.bfloat16)
TA.adamw_step(g, kp, km, kv, w16, decay, torch.tensor(lr), torch.tensor(step), torch.tensor(coef), b1, b2, eps, wd)
out["p"], out["m"], out["v"] = (norm_rel_err(a, r) for a, r in zip((kp, km, kv), ref))
out["update"] = norm_rel_err(kp - p, ref[0] - p.double())  # the step itself, not the weights it moves
out["wrong_beta2_update"] = norm_rel_err(kp - p, wrong[0] - p.double())
ulp = kp.abs() * 2.0 ** -7  # a bf16 copy: within one unit of the last place (the interpreter truncates)
out["w16_within_ulp"] = bool(((w16.float() - kp).abs() <= ulp + 1e-30).all())
out["sq_sum"] = abs(TA.grad_sq_sum(g).item() - (g.double() ** 2).sum().item()) / (g.double() ** 2).sum().item()
print("RESULT " + json.dumps(out))
'''


def test_flat_adamw_kernels_match_a_float64_adamw():
    from conftest import script_result
    out = script_result(SCRIPT, {"TRITON_INTERPRET": "1"})
    assert out["p"] < 1e-7 and out["m"] < 1e-6 and out["v"] < 1e-6, out
    assert out["update"] < 1e-4, out  # the step, read off fp32 weights ~70x its size: their rounding
    assert out["wrong_beta2_update"] > 1e-2, out  # the comparison sees a wrong hyperparameter
    assert out["w16_within_ulp"] and out["sq_sum"] < 1e-6, out


TRAIN = r'''
import json, tempfile
from pathlib import Path
import torch
from hydra import compose, initialize_config_dir
from transformerop import REPO_ROOT
from transformerop.config import register
from transformerop.data import build_data
from transformerop.model import build_model
from transformerop.train import Trainer
from transformerop.measure.reference import norm_rel_err
tmp = Path(tempfile.mkdtemp())
register()


def make_cfg(*overrides):
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def trainer(fused, name):
    cfg = make_cfg("train.progress=false", "train.batch_size=16", "train.dtype=bfloat16", "train.max_iters=12",
                   "train.eval_interval=6", "train.eval_iters=2", "model.dropout=0.0", "train.master_weights=true",
                   f"train.fused_step={str(fused).lower()}")
    torch.manual_seed(cfg.seed)
    data = build_data(cfg, torch.device("cpu"))
    return Trainer(cfg, build_model(cfg, data.tokenizer.vocab_size), data, torch.device("cpu"), tmp / name)


out = {}
runs = {}
for fused in (False, True):
    tr = trainer(fused, f"{fused}.pt")
    runs[fused] = ([tr.train_step(s).item() for s in range(6)], tr.model_state(), tr)
(l0, w0, _), (l1, w1, held) = runs[False], runs[True]
out["loss"] = max(abs(a - b) / abs(b) for a, b in zip(l1, l0))
# matrices: a bias may hold elements whose gradient is rounding noise (the key bias: softmax ignores
# it), which Adam moves by +-lr either way
out["weights"] = max(norm_rel_err(w1[k], w0[k]) for k in w0 if w0[k].dim() >= 2)
out["views"] = all(p.data_ptr() >= held.masters.flat16.data_ptr() for p in held.masters.params)
out["skipped_by_torch"] = all(m in held.opt.external for m in held.masters.masters)
out["steps"] = held.masters.step_t.item()
# a checkpoint mid-way, resumed: the same weights as running straight through
full = trainer(True, "full.pt")
for s in range(6):
    full.train_step(s)
part = trainer(True, "part.pt")
for s in range(3):
    part.train_step(s)
part.step = 3
part.save()
resumed = trainer(True, "part.pt")
resumed.resume(tmp / "part.pt")
for s in range(3, 6):
    resumed.train_step(s)
wf, wr = full.model_state(), resumed.model_state()
out["resume_exact"] = all(torch.equal(wf[k], wr[k]) for k in wf)
print("RESULT " + json.dumps(out))
'''


def test_training_with_the_fused_step_follows_the_unfused_one_and_resumes_exactly():
    from conftest import script_result
    out = script_result(TRAIN, {"TRITON_INTERPRET": "1"})
    # the same steps but for rounding: the interpreter truncates the kernel's bf16 copies where torch
    # rounds to nearest, so the forwards differ by up to a bf16 unit from the first step on (not so on a GPU)
    assert out["loss"] < 1e-3 and out["weights"] < 2e-3, out
    assert out["views"] and out["skipped_by_torch"] and out["steps"] == 6, out
    assert out["resume_exact"], out


def test_fused_step_without_master_weights_is_refused_before_any_work(tmp_path):
    from conftest import refused_before_any_work
    err = refused_before_any_work(tmp_path, "train.fused_step=true", "train.dtype=bfloat16", "train.max_iters=1")
    assert "train.fused_step=true" in err and "train.master_weights=true" in err, err[-2000:]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run `pytest -m gpu` on the device)")
def test_graphed_fused_step_trains_like_the_unfused_one(tmp_path):
    from conftest import small_graphed_trainer
    losses = {}
    for fused in (False, True):
        tr = small_graphed_trainer(tmp_path, f"{fused}.pt", "train.master_weights=true",
                                   f"train.fused_step={str(fused).lower()}")
        losses[fused] = torch.stack([tr.train_step(i).clone() for i in range(80)]).float().cpu()
    assert abs(losses[True][-20:].mean() - losses[False][-20:].mean()) < 0.05, (losses[True][-20:], losses[False][-20:])
