"""Sweeps that survive failures, resume, run under joblib / submitit, DDP and SIGKILL."""
import os
import signal
import subprocess
import sys
import time

import torch
from conftest import FAST, ROOT, offline_runs, results, run_cli

from transformerop.wandb_log import OfflineRun


def test_planted_failure_does_not_stop_the_sweep(tmp_path):
    sweep = tmp_path / "sweep"
    p = run_cli("-m", "model.n_head=4,3,2", *FAST, "logger=none", f"hydra.sweep.dir={sweep}")
    assert p.returncode != 0
    rs = [results(sweep / str(i)) for i in range(3)]
    assert [r["status"] for r in rs] == ["ok", "failed", "ok"]
    assert "not divisible by model.n_head=3" in rs[1]["error"]["message"] and rs[1]["error"]["traceback"]
    assert "2 ok, 1 failed, 0 skipped" in p.stdout and "[failed ]   1  model.n_head=3" in p.stdout


def test_joblib_two_workers_then_relaunch_runs_nothing(tmp_path):
    sweep = tmp_path / "sweep"
    args = ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "attention=naive,sdpa", *FAST,
            f"hydra.sweep.dir={sweep}"]
    p = run_cli(*args)
    assert p.returncode == 0, p.stderr[-3000:]
    jobs = [sweep / "0", sweep / "1"]
    rs = [results(j) for j in jobs]
    assert [r["status"] for r in rs] == ["ok", "ok"]
    assert [len(offline_runs(j)) for j in jobs] == [1, 1]
    assert rs[0]["wandb"]["run_id"] != rs[1]["wandb"]["run_id"]  # one run per job, none merged
    assert rs[0]["config"]["attention"]["name"] == "naive" and rs[1]["config"]["attention"]["name"] == "sdpa"

    again = run_cli(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("already ok") == 2
    assert [results(j)["started"] for j in jobs] == [r["started"] for r in rs]  # nothing rerun
    assert [len(offline_runs(j)) for j in jobs] == [1, 1]


def test_submitit_local_two_jobs(tmp_path):
    sweep = tmp_path / "sweep"
    p = run_cli("-m", "hydra/launcher=local", "attention=naive,sdpa", *FAST, "logger=none",
                f"hydra.sweep.dir={sweep}")
    assert p.returncode == 0, p.stderr[-3000:]
    assert [results(sweep / str(i))["status"] for i in range(2)] == ["ok", "ok"]
    assert list((sweep / ".submitit").iterdir())  # really went through submitit


def test_ddp_gloo_matches_single_process_with_same_global_batch(tmp_path):
    common = ["train.max_iters=60", "train.eval_interval=60", "train.progress=false", "logger=none"]
    env = {**os.environ, "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}
    ddp = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          str(ROOT / "run.py"), *common, "train.batch_size=32", f"hydra.run.dir={tmp_path / 'ddp'}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    single = run_cli(*common, "train.batch_size=32", "train.grad_accum=2", f"hydra.run.dir={tmp_path / 'one'}")
    assert single.returncode == 0, single.stderr[-3000:]
    a, b = results(tmp_path / "ddp")["metrics"], results(tmp_path / "one")["metrics"]
    assert a["steps"] == b["steps"] == 60
    assert a["val_loss"] < 2.0 and abs(a["val_loss"] - b["val_loss"]) < 0.05  # different samples, same recipe
    # Rank 0 alone writes; every rank's batch generator is in the checkpoint.
    ck = torch.load(tmp_path / "ddp" / "ckpt.pt", weights_only=True)
    assert len(ck["rng_batches"]) == 2 and not torch.equal(ck["rng_batches"][0], ck["rng_batches"][1])


def test_sigkill_then_resume_continues_curve_and_wandb_run(tmp_path):
    """Sized by the machine's own speed, not a step count: the first run is open-ended and killed
    once its checkpoint passes step 60 (however long that takes on a loaded box); the resumed run
    then goes 60 steps past the kill."""
    run_dir = tmp_path / "run"
    common = [sys.executable, str(ROOT / "run.py"), "train.eval_interval=20", "train.eval_iters=2",
              "train.progress=false", f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(common + ["train.max_iters=1000000"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 1200
    ck = run_dir / "ckpt.pt"
    while time.time() < deadline and proc.poll() is None:
        try:
            if ck.exists() and torch.load(ck, weights_only=True)["step"] >= 60:
                break
        except (RuntimeError, EOFError):  # caught between the temp file and the rename: read again
            pass
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = torch.load(ck, weights_only=True)["step"]
    assert killed_at >= 60 and not (run_dir / "results.json").exists()
    assert not list(run_dir.glob("*.tmp"))  # no half-written checkpoint left behind as the real one

    final = killed_at + 60
    p = subprocess.run(common + [f"train.max_iters={final}"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=1200)
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"at step {killed_at}" in p.stdout
    r = results(run_dir)
    assert r["metrics"]["steps"] == final
    evals = [h["step"] for h in r["history"] if "eval/val_loss" in h]
    assert evals == list(range(0, final + 1, 20))  # continuous: no gap, no repeat across the kill
    runs = offline_runs(run_dir)
    assert len(runs) == 2 and len({d.name.rsplit("-", 1)[1] for d in runs}) == 1  # same W&B run id resumed
    # every step results.json holds reached the W&B files (the killed process lost its unflushed tail,
    # the resumed one logs the checkpoint's curve again), and the printed sync line names both folders
    logged, identity = set(), set()
    for d in runs:
        run = OfflineRun(d)
        logged |= set(run.steps())
        if run.run_id is not None:  # the killed process may have flushed no record past the header
            identity.add((run.run_id, run.group))
    assert len(identity) == 1  # every folder is the same run: `wandb sync` uploads them as one
    assert {h["step"] for h in r["history"]} <= logged
    sync = next(line for line in p.stdout.splitlines() if line.startswith("upload with: wandb sync"))
    assert all(str(d) in sync for d in runs)


def test_gpu_pool_gives_each_job_its_own_gpu(tmp_path, monkeypatch):
    """The pool's leases (sweep.py): two jobs never hold one GPU; a third waits for a free one."""
    import threading

    from transformerop import sweep
    monkeypatch.setattr(sweep, "POOL_DIR", tmp_path / "pool")
    gpus = ["3", "5"]
    a, b = sweep.GPULease(gpus, poll_s=0.01), sweep.GPULease(gpus, poll_s=0.01)
    assert {a.gpu, b.gpu} == {"3", "5"}
    got = {}
    waiter = threading.Thread(target=lambda: got.setdefault("c", sweep.GPULease(gpus, poll_s=0.01)))
    waiter.start()
    time.sleep(0.3)
    assert "c" not in got  # both GPUs are held: the third job waits
    a.close()
    waiter.join(timeout=10)
    assert got["c"].gpu == a.gpu  # it takes the one released
    got["c"].close()
    b.close()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,7")
    assert sweep.visible_gpus() == ["2", "7"]  # a launcher's own GPUs are the pool
