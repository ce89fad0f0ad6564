import math

import pytest
import torch

from conftest import FAST, make_cfg, results, run_cli
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


def test_time_to_target_clock_is_per_job_in_a_multirun(tmp_path):
    """Two jobs in one multirun process: each reaches the (easy) target, and the second's clock
    starts at its own start (plus the first's start-up cost), not at the process launch."""
    sweep = tmp_path / "sweep"
    p = run_cli("-m", "seed=1,2", "train.target_loss=3.0", "train.eval_full=true", "train.eval_train=false", *FAST, "logger=none",
                f"hydra.sweep.dir={sweep}")
    assert p.returncode == 0, p.stderr[-3000:]
    a, b = (results(sweep / str(i)) for i in (0, 1))
    for r in (a, b):
        m = r["metrics"]
        assert m["target_step"] == m["steps"] and m["val_loss"] <= 3.0 + 0.05
        # eval_train=false: in-loop evals of the val split only (train loss from the steps)
        evals = [h for h in r["history"] if "val_loss" in h]
        assert evals and all("train_loss" not in h for h in evals)
        assert m["time_to_target_s"] > 0


def test_each_job_clock_pays_the_start_up_once(monkeypatch):
    """Process launched at 100 s, first job at 103 s (3 s of imports), second at 150 s: the second
    job's clock starts at 147 s, not at 100 s."""
    from transformerop import config as C
    monkeypatch.setattr(C, "_first_job_start", None)
    monkeypatch.setattr(C, "_start_time", lambda pid: 100.0)
    for now, launch in ((103.0, 100.0), (150.0, 147.0), (160.0, 157.0)):
        monkeypatch.setattr(C.time, "time", lambda now=now: now)
        C.mark_job_start()
        assert C.launch_time() == launch


def test_resume_keeps_the_lr_tensor_a_captured_step_reads():
    """train.cuda_graph: the optimizer's lr is a tensor the graph reads; loading a checkpoint must
    not swap in the checkpoint's copy (the schedule would then never reach the graph)."""
    from transformerop.train import keep_lr_tensors, set_lr
    w = torch.nn.Parameter(torch.ones(3))
    lr = torch.tensor(0.1)
    opt = torch.optim.AdamW([w], lr=lr, foreach=False)
    saved = torch.optim.AdamW([torch.nn.Parameter(torch.ones(3))], lr=torch.tensor(0.5), foreach=False).state_dict()
    lrs = [g["lr"] for g in opt.param_groups]
    opt.load_state_dict(saved)
    assert opt.param_groups[0]["lr"] is not lr  # what load_state_dict alone does
    keep_lr_tensors(opt, lrs)
    set_lr(opt, 0.25)
    assert opt.param_groups[0]["lr"] is lr and lr.item() == 0.25
