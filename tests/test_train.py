import math

import pytest
import torch
from conftest import FAST, make_cfg, results, run_cli

from transformerop import checkpoint
from transformerop.data import build_data
from transformerop.model import build_model
from transformerop.optim import lr_at
from transformerop.train import NonFiniteLoss, Trainer

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


def test_target_stop_reads_the_whole_val_split(tmp_path):
    """The stop decision and the reported loss are the same number: the whole val split's."""
    p = run_cli("train.target_loss=2.3", *FAST, "train.max_iters=200", "train.eval_interval=10", "logger=none",
                f"hydra.run.dir={tmp_path}")
    assert p.returncode == 0, p.stderr[-3000:]
    r = results(tmp_path)
    m = r["metrics"]
    assert m["target_step"] == m["steps"] < 200 and m["val_loss"] <= 2.3
    stop = [h for h in r["history"] if h["step"] == m["target_step"] and "eval/val_loss" in h][0]
    assert stop["eval/val_loss"] == m["val_loss"]  # the check and the final whole-split eval agree exactly
    assert all("eval/train_loss" not in h for h in r["history"])  # a target run checks val only
    assert [h["step"] for h in r["history"] if "eval/val_loss" in h][0] == 10  # no untrained step-0 check
    assert 0 < m["startup_s"] < m["time_to_target_s"]  # both on the clock from process launch
    assert "reached at step" in p.stdout and "from launch" in p.stdout


def test_later_jobs_of_one_process_are_not_timed_from_launch(tmp_path):
    """Hydra's basic launcher runs both jobs in one process: only the first paid the launch, so
    the second's times are named job_* (from its own start), not passed off as from launch."""
    sweep = tmp_path / "sweep"
    p = run_cli("-m", "seed=1,2", "train.target_loss=2.3", *FAST, "train.max_iters=200", "train.eval_interval=10",
                "logger=none", f"hydra.sweep.dir={sweep}")
    assert p.returncode == 0, p.stderr[-3000:]
    a, b = (results(sweep / str(i))["metrics"] for i in (0, 1))
    assert "time_to_target_s" in a and "startup_s" in a
    assert "time_to_target_s" not in b and "startup_s" not in b
    assert 0 < b["job_startup_s"] < b["job_time_to_target_s"]


def test_isolated_sweep_times_every_job_from_its_own_launch(tmp_path):
    sweep = tmp_path / "sweep"
    p = run_cli("-m", "sweep.isolate=true", "seed=1,2", "train.target_loss=2.3", *FAST, "train.max_iters=200",
                "train.eval_interval=10", "logger=none", f"hydra.sweep.dir={sweep}")
    assert p.returncode == 0, p.stderr[-3000:]
    for i in (0, 1):
        r = results(sweep / str(i))
        m = r["metrics"]
        assert r["status"] == "ok" and f"seed={i + 1}" in r["overrides"]
        assert 0 < m["startup_s"] < m["time_to_target_s"]
        # the start-up by phase adds up to startup_s (imports and checks, W&B, data, model, ...)
        phases = {k: v for k, v in m.items() if k.startswith("startup/")}
        assert "startup/checks_s" in phases and sum(phases.values()) == pytest.approx(m["startup_s"], rel=1e-6)
        assert list(phases)[:2] == ["startup/imports_s", "startup/hydra_s"]  # run.py's imports, then Hydra's work
    assert "[0] fresh process" in p.stdout and "[1] fresh process" in p.stdout


def test_process_start_is_the_launch_to_a_clock_tick():
    """A launch's time against the parent's own clock around the spawn: within one clock tick
    (/proc counts start times in ticks). Adding the ticks to /proc/stat's boot time, which is
    truncated to whole seconds, would put it up to a second early."""
    import os
    import subprocess
    import time

    from transformerop import clock
    tick = 1 / os.sysconf("SC_CLK_TCK")
    before = time.time()
    child = subprocess.Popen(["sleep", "5"])
    after = time.time()
    try:
        started = clock.start_of(child.pid)
    finally:
        child.kill()
        child.wait()
    assert before - tick - 0.002 <= started <= after + 0.002, (before, started, after)


def test_clock_names_times_by_where_they_start(monkeypatch):
    from transformerop import clock
    monkeypatch.setattr(clock, "_jobs_started", 0)
    monkeypatch.setattr(clock, "process_start", lambda: 100.0)
    monkeypatch.setattr(clock.time, "time", lambda: 103.0)
    clock.job_started()
    assert clock.fresh() and clock.prefix() == "" and clock.origin() == 100.0
    monkeypatch.setattr(clock.time, "time", lambda: 150.0)
    clock.job_started()
    assert not clock.fresh() and clock.prefix() == "job_" and clock.origin() == 150.0


def test_a_fresh_launch_splits_into_imports_and_hydra(monkeypatch):
    """Launch at 100 s, run.py's imports done at 102 s, the job starting at 102.5 s: imports 2 s,
    Hydra 0.5 s. A later job of the same process pays neither: it marks only hydra, from its start."""
    from transformerop import clock
    monkeypatch.setattr(clock, "_jobs_started", 0)
    monkeypatch.setattr(clock, "_imported_at", None)  # restored after the test, as the other globals
    monkeypatch.setattr(clock, "process_start", lambda: 100.0)
    monkeypatch.setattr(clock.time, "time", lambda: 102.0)
    clock.imports_done()
    monkeypatch.setattr(clock.time, "time", lambda: 102.5)
    clock.job_started()
    clock.mark_launch()
    assert clock.phases() == {"imports": 2.0, "hydra": 0.5}
    clock.job_started()
    clock.mark_launch()
    assert clock.phases() == {"hydra": 0.0}
    monkeypatch.setattr(clock, "_jobs_started", 0)
    monkeypatch.setattr(clock, "_imported_at", None)  # a fresh launch through another entry point
    clock.job_started()
    clock.mark_launch()
    assert clock.phases() == {"imports": 2.5}


def test_resume_keeps_the_lr_tensor_a_captured_step_reads():
    """train.cuda_graph: the optimizer's lr and state are tensors the graph reads; loading a
    checkpoint (here one written by torch.optim.AdamW) must copy into them, never swap them."""
    from transformerop.optim import AdamW, set_lr
    w = torch.nn.Parameter(torch.ones(3))
    lr = torch.tensor(0.1)
    opt = AdamW([{"params": [w]}], lr=lr)
    held = dict(opt.state[w])
    other = torch.nn.Parameter(torch.ones(3))
    theirs = torch.optim.AdamW([other], lr=0.5, foreach=False)
    other.grad = torch.full((3,), 2.0)
    theirs.step()
    opt.load_state_dict(theirs.state_dict())
    set_lr(opt, 0.25)
    assert opt.param_groups[0]["lr"] is lr and lr.item() == 0.25
    assert all(opt.state[w][k] is held[k] for k in held)  # the same tensors, new values
    assert opt.state[w]["step"].item() == 1 and torch.equal(opt.state[w]["exp_avg"], theirs.state[other]["exp_avg"])


def test_whole_split_loss_is_the_float64_formula_for_any_eval_batch():
    """evaluate_loss over eval_batches at two batch sizes (train.eval_batch_size) against a float64
    sum of -log p(target) over every scored character of the split, written out here."""
    from conftest import SAMPLE

    from transformerop.measure.reference import float64_model
    from transformerop.train import evaluate_loss
    cfg = make_cfg(*SAMPLE, "model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.block_size=32")
    torch.manual_seed(0)
    data = build_data(cfg, CPU)
    model = build_model(cfg, data.tokenizer.vocab_size).eval()
    ref = float64_model(model)
    nll, count = 0.0, 0
    with torch.no_grad():
        for x, y in data.eval_batches("val", 10**9):
            logp = torch.log_softmax(ref(x)[0], dim=-1)
            scored = y >= 0
            nll -= logp[scored].gather(-1, y[scored][:, None]).sum().item()
            count += int(scored.sum())
    expected = nll / count
    for batch in (5, 64):
        got = evaluate_loss(model, data.eval_batches("val", batch), CPU, "float32")
        assert abs(got - expected) / expected < 1e-5, (batch, got, expected)
