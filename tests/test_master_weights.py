"""train.master_weights: bf16 weights as the parameters, fp32 masters in the optimizer. The claim
is autocast's arithmetic exactly, so the checks are bit-for-bit against a run without it (CPU
autocast, bf16), plus checkpoints that keep the fp32 masters and a config refused up front."""
import pytest
import torch
from conftest import make_cfg, refused_before_any_work

from transformerop import checkpoint
from transformerop.data import build_data
from transformerop.model import build_model
from transformerop.train import Trainer

CPU = torch.device("cpu")


def trainer(tmp_path, *overrides, name="ckpt.pt"):
    cfg = make_cfg("train.progress=false", "train.batch_size=16", "train.dtype=bfloat16", "train.max_iters=12",
                   "train.eval_interval=6", "train.eval_iters=2", "model.dropout=0.1", *overrides)
    torch.manual_seed(cfg.seed)
    data = build_data(cfg, CPU)
    return Trainer(cfg, build_model(cfg, data.tokenizer.vocab_size), data, CPU, tmp_path / name)


def weights(tr) -> dict:
    return {k: v.float().clone() for k, v in tr.model_state().items()}


@pytest.mark.parametrize("accum", [1, 3])
def test_training_matches_autocast_bit_for_bit(tmp_path, accum):
    runs = {}
    for on in (False, True):
        tr = trainer(tmp_path, f"train.master_weights={str(on).lower()}", f"train.grad_accum={accum}",
                     name=f"{on}.pt")
        losses = [tr.train_step(s).item() for s in range(8)]
        runs[on] = losses, weights(tr), tr
    (l0, w0, plain), (l1, w1, held) = runs[False], runs[True]
    assert l0 == l1
    assert w0.keys() == w1.keys()
    for k in w0:
        assert torch.equal(w0[k], w1[k]), k
    # what the forward reads: the bf16 weights are the masters rounded, the rest fp32 as before
    for n, p in held.raw_model.named_parameters():
        if p in held.masters.of:
            assert p.dtype == torch.bfloat16 and torch.equal(p, held.masters.of[p].to(torch.bfloat16)), n
        else:
            assert p.dtype == torch.float32 and ("wte" in n or "wpe" in n or "ln" in n), n
    per_block = 8 if held.cfg.model.bias else 4  # c_attn, c_proj, c_fc, c_proj: weights (and biases)
    assert len(held.masters.params) == per_block * held.cfg.model.n_layer
    # the optimizer steps the masters: no bf16 tensor in its groups or its state
    assert all(p.dtype == torch.float32 for g in held.opt.param_groups for p in g["params"])
    assert plain.masters is None
    # the in-loop evaluation (addition's exact match decodes outside autocast, from fp32 weights)
    assert plain.evaluate() == held.evaluate()
    assert all(p.dtype == torch.bfloat16 for p in held.masters.params)  # the copies are back after it


def test_a_planted_rounding_of_the_masters_is_caught(tmp_path):
    """Stepping the bf16 copies instead of the masters (the bug this module exists to avoid) must
    show: the comparison above is sensitive to it."""
    plain = trainer(tmp_path, name="a.pt")
    held = trainer(tmp_path, "train.master_weights=true", name="b.pt")
    real_push = held.masters.push

    def push_and_round():  # masters rounded to bf16 after every step: fp32 accumulation lost
        real_push()
        with torch.no_grad():
            for m in held.masters.masters:
                m.copy_(m.to(torch.bfloat16))
    held.masters.push = push_and_round
    for s in range(8):
        plain.train_step(s)
        held.train_step(s)
    w0, w1 = weights(plain), weights(held)
    assert any(not torch.equal(w0[k], w1[k]) for k in w0)


def test_checkpoint_keeps_fp32_masters_and_resume_continues_exactly(tmp_path):
    full = trainer(tmp_path, "train.master_weights=true", name="full.pt")
    for s in range(8):
        full.train_step(s)
    part = trainer(tmp_path, "train.master_weights=true", name="part.pt")
    for s in range(4):
        part.train_step(s)
    part.step = 4
    part.save()
    saved = checkpoint.load(tmp_path / "part.pt")["model"]
    assert all(v.dtype == torch.float32 for v in saved.values())
    for p, m in part.masters.of.items():  # the masters themselves, not their bf16 copies
        name = next(n for n, q in part.raw_model.named_parameters() if q is p)
        assert torch.equal(saved[name], m.detach())
    resumed = trainer(tmp_path, "train.master_weights=true", name="part.pt")
    resumed.resume(tmp_path / "part.pt")
    for s in range(4, 8):
        resumed.train_step(s)
    w_full, w_res = weights(full), weights(resumed)
    for k in w_full:
        assert torch.equal(w_full[k], w_res[k]), k


def test_full_precision_and_trained_model_give_fp32_weights(tmp_path):
    tr = trainer(tmp_path, "train.master_weights=true")
    tr.train_step(0)
    bf16 = [p.data_ptr() for p in tr.masters.params]
    with tr.full_precision() as model:
        assert all(p.dtype == torch.float32 for p in model.parameters())
    assert [p.data_ptr() for p in tr.masters.params] == bf16  # the same storage back (a captured step reads it)
    assert all(p.dtype == torch.bfloat16 for p in tr.masters.params)
    masters = [m.detach().clone() for m in tr.masters.masters]
    model = tr.trained_model()
    held = [p for p in model.parameters() if p.dim() == 2 and p.shape[0] != tr.data.tokenizer.vocab_size]
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert any(torch.equal(p.detach(), m) for p in held for m in masters)


def test_fp32_run_with_master_weights_is_refused_before_any_work(tmp_path):
    err = refused_before_any_work(tmp_path, "train.master_weights=true", "train.dtype=float32", "train.max_iters=1")
    assert "train.master_weights=true" in err and "train.dtype=bfloat16" in err, err[-2000:]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run `pytest -m gpu` on the device)")
def test_graphed_step_drops_the_casts_and_trains_alike(tmp_path):
    """In the captured step the two casts a weight become two multi-tensor copies, and training
    follows the run without masters (not bit for bit on the GPU: the fused norm's column sums and
    the attention's backward add in varying order)."""
    from conftest import lever_kernels_and_losses
    trainers, counts, losses = lever_kernels_and_losses(tmp_path, "train.master_weights", "model.fused_norm=true")
    n_held = len(trainers[True].masters.params)
    # each held weight loses its forward cast and its gradient's cast back; the copies add <= 4 launches
    assert counts[False] - counts[True] >= 2 * n_held - 4, (counts, n_held)
    assert abs(losses[True][-20:].mean() - losses[False][-20:].mean()) < 0.05, (losses[True][-20:], losses[False][-20:])
