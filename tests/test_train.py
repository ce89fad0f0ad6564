import math

import pytest
import torch

from conftest import make_cfg
from transformerop import checkpoint
from transformerop.data import build_data
from transformerop.model import build_model
from transformerop.train import NonFiniteLoss, Trainer, lr_at

CPU = torch.device("cpu")


def small(*overrides):
    return make_cfg("train.progress=false", "train.batch_size=64", *overrides)


def make_trainer(cfg, ckpt):
    torch.manual_seed(cfg.seed)
    data = build_data(cfg, CPU)
    return Trainer(cfg, build_model(cfg, data.tokenizer.vocab_size), data, CPU, ckpt)


def test_lr_schedule_warmup_then_cosine():
    t = small("train.lr=1e-3", "train.min_lr=1e-4", "train.warmup_iters=10", "train.max_iters=110").train
    assert lr_at(0, t) == pytest.approx(1e-4)
    assert lr_at(9, t) == pytest.approx(1e-3)
    assert lr_at(60, t) == pytest.approx(1e-4 + 0.5 * 9e-4)  # halfway through the cosine
    assert lr_at(110, t) == pytest.approx(1e-4)


def test_short_training_run_loss_falls(tmp_path):
    cfg = small("train.max_iters=150", "train.eval_interval=150")
    tr = make_trainer(cfg, tmp_path / "ckpt.pt")
    before = tr.evaluate()["val_loss"]
    m = tr.fit()
    assert before > 2.4  # ~ln(12) for an untrained model
    assert m["val_loss"] < 1.2  # the answer's digits become predictable from the operands
    assert m["steps"] == 150


def test_checkpoint_round_trip_and_resume_matches_uninterrupted(tmp_path):
    cfg = small("model.dropout=0.1", "train.max_iters=40", "train.eval_interval=20", "train.eval_iters=2")
    full = make_trainer(cfg, tmp_path / "full.pt")
    full.fit()

    # Interrupt a second run at step 30: its checkpoint holds step 20.
    broken = make_trainer(cfg, tmp_path / "run.pt")
    real_step = broken.train_step

    def dies_at_30(step):
        if step == 30:
            raise KeyboardInterrupt
        return real_step(step)
    broken.train_step = dies_at_30
    with pytest.raises(KeyboardInterrupt):
        broken.fit()
    assert checkpoint.load(tmp_path / "run.pt")["step"] == 20

    resumed = make_trainer(cfg, tmp_path / "run.pt")
    resumed.resume(tmp_path / "run.pt")
    assert resumed.step == 20
    resumed.fit()
    for (name, a), (_, b) in zip(full.raw_model.state_dict().items(), resumed.raw_model.state_dict().items()):
        assert torch.equal(a, b), name


def test_checkpoint_of_another_model_is_refused(tmp_path):
    cfg = small("train.max_iters=1", "train.eval_interval=1")
    make_trainer(cfg, tmp_path / "a.pt").save()
    other = small("model.n_layer=3")
    with pytest.raises(checkpoint.CheckpointError, match="different model.*n_layer: checkpoint 2 vs config 3"):
        make_trainer(other, tmp_path / "b.pt").resume(tmp_path / "a.pt")


def test_corrupt_checkpoint_is_refused(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"\x80\x04garbage")
    with pytest.raises(checkpoint.CheckpointError, match="cannot be loaded safely"):
        checkpoint.load(bad)


def test_nan_loss_stops_with_step_and_keeps_last_good_checkpoint(tmp_path):
    cfg = small("train.max_iters=60", "train.eval_interval=20", "train.eval_iters=2")
    tr = make_trainer(cfg, tmp_path / "ckpt.pt")
    real_step = tr.train_step

    def nan_at_27(step):
        loss = real_step(step)
        return loss * math.nan if step == 27 else loss
    tr.train_step = nan_at_27
    with pytest.raises(NonFiniteLoss, match="at step 27"):
        tr.fit()
    assert checkpoint.load(tmp_path / "ckpt.pt")["step"] == 20
