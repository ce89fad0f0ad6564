"""One record, two sinks: the W&B run read back from its offline record log says what
results.json says -- config, every metric, exit code -- for train, generate, bench and a job that
failed its config check; provenance; failed attempts never replace an ok record."""
import json
import subprocess

import pytest
from conftest import FAST, ROOT, results, run_cli

from transformerop import tracking
from transformerop.wandb_log import OfflineRun, records, run_folders


def assert_sinks_agree(job_dir, exit_code=0):
    r = results(job_dir)
    folders = run_folders(job_dir)
    assert len(folders) == 1, folders
    run = OfflineRun.finished(folders[0])
    assert run.run_id == r["wandb"]["run_id"] and run.exit_code == exit_code
    assert run.user_config() == r["config"]
    summary = run.user_summary()
    for key, value in r["metrics"].items():
        assert key in summary, key
        got = summary[key]
        assert got == value or (isinstance(value, float) and got == pytest.approx(value, rel=1e-12)), key
    assert summary["status"] == r["status"]
    return r, run


def test_train_job_wandb_equals_results(tmp_path):
    p = run_cli(*FAST, f"hydra.run.dir={tmp_path}")
    assert p.returncode == 0, p.stderr[-3000:]
    r, run = assert_sinks_agree(tmp_path)
    assert {"val_loss", "exact_match", "tok_per_s", "step_ms", "startup_s"} <= set(r["metrics"])
    # the curves have their own names, so no history row can overwrite a final metric
    logged = {k for row in run.history for k in row}
    assert not logged & set(r["metrics"]), logged & set(r["metrics"])
    evals = [h["step"] for h in r["history"] if "eval/val_loss" in h]
    assert evals == [0, 15, 30] and set(evals) <= set(run.steps())
    assert run.name == "max_iters=30 eval_interval=15 eval_iters=2 progress=false"


def test_generate_job_has_its_own_throughput_key(tmp_path):
    p = run_cli("task=generate", "generate.tokens=20", "generate.repeats=2", *FAST, f"hydra.run.dir={tmp_path}")
    assert p.returncode == 0, p.stderr[-3000:]
    r, _ = assert_sinks_agree(tmp_path)
    m = r["metrics"]
    assert m["decode_tok_per_s"] > 0 and m["tok_per_s"] > 0  # decode beside the training loop's own
    assert m["decode_tok_per_s"] != m["tok_per_s"]


def test_bench_job_writes_each_metric_once(tmp_path):
    p = run_cli("task=bench", "bench.target=matmul", "bench.warmup_ms=2", "bench.rep_ms=5", "model=gpt",
                "model.n_embd=64", "model.n_head=2", "model.block_size=16", "train.batch_size=4",
                f"hydra.run.dir={tmp_path}")
    assert p.returncode == 0, p.stderr[-3000:]
    r, run = assert_sinks_agree(tmp_path)
    assert not any(k.startswith("timing/") for k in run.user_summary())  # timings live in one table
    assert "matmul" in r["timings"] and r["metrics"]["matmul_median_ms"] == r["timings"]["matmul"]["median_ms"]


def test_config_check_failure_in_a_sweep_has_a_failed_wandb_run(tmp_path):
    p = run_cli("-m", "model.n_head=4,3", *FAST, f"hydra.sweep.dir={tmp_path}")
    assert p.returncode == 1
    r, run = assert_sinks_agree(tmp_path / "1", exit_code=1)
    assert r["status"] == "failed" and "not divisible" in run.summary["error"]
    assert run.group == r["wandb"]["group"] == tmp_path.name


def test_record_log_reader_checks_its_checksums(tmp_path):
    p = run_cli(*FAST, "train.max_iters=2", "train.eval_interval=1", f"hydra.run.dir={tmp_path}")
    assert p.returncode == 0, p.stderr[-3000:]
    path = next(run_folders(tmp_path)[0].glob("*.wandb"))
    assert records(path)
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF  # a flipped byte inside the first records
    bad = tmp_path / "bad.wandb"
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum"):
        records(bad)


def test_env_records_commit_dirty_flag_and_diff_hash(tmp_path):
    p = run_cli(*FAST, "train.max_iters=2", "train.eval_interval=1", "logger=none", f"hydra.run.dir={tmp_path}")
    assert p.returncode == 0, p.stderr[-3000:]
    env = results(tmp_path)["env"]
    assert len(env["git_commit"]) == 40 and env["git_sha"] == env["git_commit"][:7]
    assert isinstance(env["git_dirty"], bool)
    assert (env["git_diff_sha256"] is None) == (not env["git_dirty"])
    head_tree = subprocess.run(["git", "rev-parse", "HEAD^{tree}"], cwd=ROOT, capture_output=True,
                               text=True).stdout.strip()
    assert env["git_dirty"] == (env["git_tree"] != head_tree)  # the files as they were, content-addressed
    # the report names the commit whose tree the record's files had, wherever .git stood
    from transformerop.report import provenance
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    stale = {"git_commit": "0" * 40, "git_tree": head_tree, "git_dirty": True, "git_diff_sha256": "ab"}
    assert provenance([{"env": stale}]) == {"commits": [head], "clean": True, "text": f"{head[:7]} (clean)"}
    unknown_tree = {**stale, "git_tree": "f" * 40}
    assert not provenance([{"env": unknown_tree}])["clean"]


def test_a_failed_attempt_never_replaces_an_ok_record(tmp_path):
    ok = {"status": "ok", "started": "2026-01-01T00:00:00", "metrics": {"val_loss": 1.0}}
    (tmp_path / "results.json").write_text(json.dumps(ok))
    from conftest import make_cfg
    tr = tracking.Tracker(make_cfg("logger=none"), tmp_path, "train", [], "runs", [])
    kept = tr.finish("failed", {"type": "X", "message": "boom", "traceback": ""}, {})
    assert json.loads((tmp_path / "results.json").read_text()) == ok
    attempts = list((tmp_path / tracking.ATTEMPTS).glob("*-failed.json"))
    assert len(attempts) == 1 and json.loads(attempts[0].read_text())["error"]["message"] == "boom"
    assert kept["status"] == "failed"


def test_train_run_files_hold_artifacts_console_and_name(tmp_path):
    p = run_cli(*FAST, f"hydra.run.dir={tmp_path}")
    assert p.returncode == 0, p.stderr[-3000:]
    folder = run_folders(tmp_path)[0]
    run = OfflineRun.finished(folder)
    kinds = {a["type"]: a for a in run.artifacts}
    assert kinds["model"]["files"] == ["best.pt"] and kinds["results"]["files"] == ["results.json"]
    # W&B's console capture starts with its run (after start-up): the summary, printed once the run
    # exists, is always there; the job's whole console, the first lines too, is its run.log
    assert "held-out exact match" in (folder / "files" / "output.log").read_text()
    assert "run.log" in run.files
    console = (folder / "files" / "run.log").read_text()
    assert "step 15:" in console and "step 30:" in console and "held-out exact match" in console
    assert run.name == "max_iters=30 eval_interval=15 eval_iters=2 progress=false"
    assert run.job_type == "train" and "attention=sdpa" in run.tags


def test_hparams_search_runs_trials_and_reports_the_best(tmp_path):
    import pytest
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    sweep = tmp_path / "search"
    p = run_cli("-m", "hparams_search=addition", "hydra.sweeper.n_trials=3",
                "train.max_iters=choice(40,80)", "train.eval_interval=40", "train.eval_iters=2",
                "data.n_test=100", "train.progress=false", "logger=none", f"hydra.sweep.dir={sweep}")
    assert p.returncode == 0, p.stderr[-3000:]
    rs = [results(sweep / str(i)) for i in range(3)]
    assert all(r["status"] == "ok" for r in rs)
    import yaml
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    front = best["solutions"]
    # every Pareto solution is one of the trials, with the values that trial's main returned
    trials = {(r["metrics"]["exact_match"], r["wall_s"]) for r in rs}
    assert front and all(tuple(s["values"]) in trials for s in front)
    from transformerop.report import report
    md = report([sweep], use_wandb=False)["md"].read_text()
    assert "## Search: the Pareto front" in md and "| exact_match | wall_s | parameters |" in md


def _tracker(tmp_path):
    from conftest import make_cfg
    return tracking.Tracker(make_cfg(), tmp_path, "train", [], "runs", [], "unit")


def test_wandb_starts_after_startup_and_replays_what_came_before_in_order(tmp_path):
    """The W&B run waits for the end of start-up; what was logged before reaches it in order, and
    a queued call that fails (planted here) costs that call only."""
    from transformerop import clock
    clock.job_started()
    tr = _tracker(tmp_path)
    tr.start()
    tr.log({"train/loss": 3.0}, step=1)
    tr._to_wandb(lambda run: 1 / 0)
    tr.log({"train/loss": 2.0}, step=2)
    assert tr.run is None  # start-up is not over: W&B has not started
    clock.end_startup()
    tr.log({"train/loss": 1.0}, step=3)
    tr.set(val_loss=1.5)
    rec = tr.finish("ok", None, {})
    run = OfflineRun.finished(run_folders(tmp_path)[0])
    assert [h["train/loss"] for h in run.history if "train/loss" in h] == [3.0, 2.0, 1.0]
    assert rec["status"] == "ok" and run.exit_code == 0 and run.user_summary()["val_loss"] == 1.5


def test_logger_start_train_end_waits_for_the_loop_to_end(tmp_path, monkeypatch):
    """logger.start=train_end: the run does not start at the end of start-up (wandb is already
    imported here, so a run waiting on that would start within milliseconds), only once the train
    loop is over; what the loop logged reaches it in order."""
    import time

    import wandb
    from conftest import make_cfg

    from transformerop import clock
    calls, real_init = [], wandb.init
    monkeypatch.setattr(wandb, "init", lambda *a, **k: calls.append(time.time()) or real_init(*a, **k))
    clock.job_started()
    tr = tracking.Tracker(make_cfg("logger.start=train_end"), tmp_path, "train", [], "runs", [], "unit")
    tr.start()
    clock.end_startup()
    for step, loss in enumerate((3.0, 2.0)):
        tr.log({"train/loss": loss}, step=step)
    time.sleep(0.5)
    assert calls == [] and tr.run is None
    clock.train_over.set()
    tr.log({"train/loss": 1.0}, step=2)
    tr.finish("ok", None, {})
    run = OfflineRun.finished(run_folders(tmp_path)[0])
    assert len(calls) == 1 and [h["train/loss"] for h in run.history if "train/loss" in h] == [3.0, 2.0, 1.0]


def test_a_wandb_start_that_fails_keeps_the_metrics_and_fails_the_job(tmp_path, monkeypatch):
    import wandb

    from transformerop import clock

    def unreachable(*args, **kwargs):
        raise ConnectionError("no route to the W&B server")
    monkeypatch.setattr(wandb, "init", unreachable)
    clock.job_started()
    tr = _tracker(tmp_path)
    tr.start()
    tr.log({"train/loss": 1.0}, step=1)
    tr.set(val_loss=1.5)
    info = tr.wandb_info()  # the summary asks before finish: it must not raise
    assert info["mode"] == "off" and "no route" in info["error"]
    rec = tr.finish("ok", None, {})
    assert rec["status"] == "failed" and rec["error"]["type"] == "WandbError" and "no route" in rec["error"]["message"]
    assert rec["metrics"]["val_loss"] == 1.5 and rec["history"][0]["train/loss"] == 1.0


def test_the_offline_reader_waits_for_a_file_flushed_late(tmp_path):
    """A .wandb file read before W&B's service flushed its tail lacks the last rows and the exit
    record (planted here: the file cut short, completed 0.5 s later); OfflineRun.finished waits."""
    import shutil
    import threading
    import time

    from transformerop import clock
    clock.job_started()
    (tmp_path / "job").mkdir()
    tr = _tracker(tmp_path / "job")
    tr.start()
    clock.end_startup()
    for step, loss in enumerate((3.0, 2.0, 1.0)):
        tr.log({"train/loss": loss}, step=step)
    tr.finish("ok", None, {})
    done = OfflineRun.finished(run_folders(tmp_path / "job")[0])
    late = tmp_path / "late" / done.folder.name
    shutil.copytree(done.folder, late)
    log_file = next(late.glob("*.wandb"))
    full = log_file.read_bytes()
    log_file.write_bytes(full[:7])  # the header alone: nothing flushed yet
    assert OfflineRun(late).exit_code is None and OfflineRun(late).history == []
    threading.Timer(0.5, log_file.write_bytes, args=(full,)).start()
    t0 = time.monotonic()
    run = OfflineRun.finished(late, timeout=20)
    assert time.monotonic() - t0 >= 0.4
    assert run.exit_code == 0 and [h["train/loss"] for h in run.history] == [3.0, 2.0, 1.0]
