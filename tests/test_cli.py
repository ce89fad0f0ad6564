"""The CLI as a user runs it, through a subprocess."""

from conftest import FAST, offline_runs, results, run_cli


def test_main_job_small(tmp_path):
    run_dir = tmp_path / "run"
    p = run_cli(*FAST, f"hydra.run.dir={run_dir}")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "held-out exact match" in p.stdout and "results:" in p.stdout
    r = results(run_dir)
    assert r["status"] == "ok" and r["task"] == "train" and r["error"] is None
    assert r["metrics"]["steps"] == 30 and 0.0 <= r["metrics"]["exact_match"] <= 1.0
    assert r["metrics"]["val_loss"] < 2.4 and r["metrics"]["peak_memory_bytes"] > 0
    assert r["config"]["model"]["n_embd"] == 64 and r["env"]["torch"]
    assert r["wandb"]["mode"] == "offline" and len(offline_runs(run_dir)) == 1
    assert (run_dir / "ckpt.pt").exists()
    # Rerunning into the same dir resumes from the checkpoint instead of starting over.
    p2 = run_cli(*FAST[:-3], "train.max_iters=45", "train.eval_interval=15", "train.eval_iters=2",
                 "train.progress=false", f"hydra.run.dir={run_dir}")
    assert p2.returncode == 0, p2.stderr[-3000:]
    assert "resumed from" in p2.stdout and "at step 30" in p2.stdout
    assert results(run_dir)["metrics"]["steps"] == 45


def test_two_job_multirun_shares_a_group(tmp_path):
    sweep = tmp_path / "sweep"
    p = run_cli("-m", "attention=naive,sdpa", *FAST, f"hydra.sweep.dir={sweep}")
    assert p.returncode == 0, p.stderr[-3000:]
    jobs = sorted(d for d in sweep.iterdir() if d.is_dir() and d.name.isdigit())
    assert [d.name for d in jobs] == ["0", "1"]
    rs = [results(d) for d in jobs]
    assert [r["config"]["attention"]["name"] for r in rs] == ["naive", "sdpa"]
    assert all(r["status"] == "ok" for r in rs)
    assert rs[0]["wandb"]["group"] == rs[1]["wandb"]["group"] == "sweep"
    assert rs[0]["wandb"]["run_id"] != rs[1]["wandb"]["run_id"]
    assert all(len(offline_runs(d)) == 1 for d in jobs)
    assert "2 ok, 0 failed, 0 skipped" in p.stdout


def test_bad_overrides_fail_cleanly(tmp_path):
    cases = {"model.n_layer=abc": "model.n_layer", "model=nope": "model/nope",
             "model.n_embd=30": "not divisible by model.n_head"}
    for override, needle in cases.items():
        run_dir = tmp_path / override.replace("=", "_")
        p = run_cli(override, f"hydra.run.dir={run_dir}")
        assert p.returncode != 0, override
        assert needle in p.stderr, (override, p.stderr[-2000:])
        assert not run_dir.exists(), f"{override} left {list(run_dir.rglob('*'))}"


def test_cuda_backend_on_cpu_fails_cleanly_and_is_skipped_in_a_sweep(tmp_path):
    run_dir = tmp_path / "single"
    p = run_cli("attention=cuda", *FAST, "logger=none", f"hydra.run.dir={run_dir}")
    assert p.returncode != 0
    assert "skipped: attention=cuda needs a CUDA GPU" in p.stderr
    assert "Traceback" not in p.stderr
    sweep = tmp_path / "sweep"
    p = run_cli("-m", "attention=cuda,sdpa", *FAST, f"hydra.sweep.dir={sweep}")
    assert p.returncode == 0, p.stderr[-3000:]  # skipped is not failed
    cuda, sdpa = results(sweep / "0"), results(sweep / "1")
    assert cuda["status"] == "skipped" and "needs a CUDA GPU" in cuda["error"]["message"]
    assert cuda["wandb"]["mode"] == "offline" and len(offline_runs(sweep / "0")) == 1  # W&B says so too
    assert sdpa["status"] == "ok"
    assert "1 ok, 0 failed, 1 skipped" in p.stdout


def test_validate_task_on_cpu(tmp_path):
    p = run_cli("task=validate", "logger=none", f"hydra.run.dir={tmp_path}")
    assert p.returncode == 0, p.stderr[-3000:]
    table = results(tmp_path)["tables"]["validation"]
    rows = {(r[0], r[1]): r for r in table["rows"]}
    for backend in ("naive_loop", "naive softmax=torch", "sdpa"):
        for dtype in ("float32", "bfloat16"):
            assert rows[(backend, dtype)][-1] == "pass"
    assert float(rows[("sdpa", "float32")][2]) < 1e-5
    assert rows[("cuda v5", "float32")][-1].startswith("skipped: attention=cuda needs a CUDA GPU")
    for path in ("kv_cache", "static", "compiled"):  # decode paths vs recompute: same tokens
        assert rows[(f"decode={path}", "float32")][-1] == "pass"
    assert rows[("decode=fused", "float32")][-1].startswith("skipped: decode=fused needs CUDA")


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr[-2000:]
    return lines[0]


def test_bad_input_gets_one_line_before_any_run_dir(tmp_path):
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "tinyshakespeare.txt").write_text("not shakespeare")
    cases = {
        ("train.lr=-1",): "train.lr=-1.0 is out of range: it must be > 0",
        ("train.max_iters=-5",): "train.max_iters=-5 is out of range: it must be >= 0",
        ("+foo=1",): "foo is not a config field",
        ("+train.lrr=0.1",): "train.lrr is not a config field",
        ("model.dropout=1",): "model.dropout=1.0 is out of range: it must be >= 0.0 and < 1.0",
        ("data=shakespeare", f"data.cache_dir={tmp_path / 'nowhere'}"): "data.cache_dir=",
        ("data=shakespeare", f"data.cache_dir={tmp_path}", "data.url=null"): "put the file (sha256 86c4e6aa",
        ("data=shakespeare", f"data.cache_dir={corrupt}"): "is corrupt: sha256",
        ("train.resume=/nonexistent/ckpt.pt",): "train.resume=/nonexistent/ckpt.pt: no such checkpoint file",
        ("model.fused_mlp=true", "model.n_embd=36", "model.n_head=6"): "model.n_embd=36: model.fused_mlp=true needs",
        ("attention=triton", "model.n_embd=120", "model.n_head=3"):
            "attention=triton has kernels for head dims [16, 32, 64, 128], not model.n_embd / model.n_head = 120/3 = 40",
        ("task=generate", "model.block_size=16", "decode.keep=17"): "decode.keep=17 > model.block_size=16",
        ("task=bench", "bench.target=train_step", "bench.seq_len=40"):
            "bench.seq_len=40: bench.target=train_step trains on the data's own windows",
    }
    for args, needle in cases.items():
        run_dir = tmp_path / "run"
        p = run_cli(*args, f"hydra.run.dir={run_dir}")
        assert p.returncode == 2, (args, p.stderr[-2000:])
        line = _one_line(p.stderr)
        assert line.startswith("error: ") and needle in line, (args, line)
        assert not run_dir.exists(), f"{args} left {list(run_dir.rglob('*'))}"
    assert not (tmp_path / "nowhere").exists()  # a missing cache dir is named, not created


def test_checkpoint_errors_are_one_line_and_keep_the_ok_record(tmp_path):
    run_dir = tmp_path / "run"
    p = run_cli(*FAST, "logger=none", f"hydra.run.dir={run_dir}")
    assert p.returncode == 0, p.stderr[-3000:]
    ok = results(run_dir)
    (run_dir / "ckpt.pt").write_bytes((run_dir / "ckpt.pt").read_bytes()[:1000])  # truncated
    p = run_cli(*FAST, "logger=none", f"hydra.run.dir={run_dir}")
    assert p.returncode == 1
    line = _one_line(p.stderr)
    assert "cannot be loaded safely" in line and "train.resume=false" in line and "Traceback" not in p.stderr
    assert results(run_dir) == ok  # the earlier ok record stays; the failed attempt is kept beside it
    assert len(list((run_dir / "attempts").glob("*-failed.json"))) == 1
    other = tmp_path / "other"
    p = run_cli(*FAST, "model.n_layer=3", f"train.resume={run_dir / 'best.pt'}", "logger=none",
                f"hydra.run.dir={other}")
    assert p.returncode == 1
    line = _one_line(p.stderr)
    assert "is from a different model (n_layer: checkpoint 2 vs config 3)" in line and "train.resume=false" in line


COUNT_COMPOSES = """
import runpy, sys
from hydra._internal.hydra import Hydra
calls = []
compose = Hydra.compose_config
Hydra.compose_config = lambda self, *a, **k: calls.append(1) or compose(self, *a, **k)
sys.argv = ["run.py", *sys.argv[1:]]
try:
    runpy.run_path("run.py", run_name="__main__")
finally:
    print("COMPOSES", len(calls))
"""


def test_a_launch_composes_its_config_once_and_hydra_mode_still_works(tmp_path):
    """run.py composes the config once (Hydra alone composes it twice: once to read hydra.mode);
    hydra.mode given on the command line is still obeyed, and no config file sets it."""
    import subprocess
    import sys

    from conftest import ROOT
    run_dir = tmp_path / "run"
    p = subprocess.run([sys.executable, "-c", COUNT_COMPOSES, *FAST, f"hydra.run.dir={run_dir}", "logger=none"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "COMPOSES 1" in p.stdout and results(run_dir)["status"] == "ok"
    sweep = tmp_path / "sweep"
    p = run_cli("hydra.mode=MULTIRUN", "attention=naive,sdpa", *FAST, "logger=none", f"hydra.sweep.dir={sweep}")
    assert p.returncode == 0, p.stderr[-3000:]
    assert sorted(d.name for d in sweep.iterdir() if d.is_dir() and d.name.isdigit()) == ["0", "1"]
    for f in [*(ROOT / "conf").rglob("*.yaml"), *(ROOT / "experiments").glob("**/*.yaml")]:
        if "results" not in f.parts:
            assert "mode: MULTIRUN" not in f.read_text() and "mode: RUN" not in f.read_text(), f


def test_text_training_without_a_sample(tmp_path):
    """train.sample_tokens=0: the job trains and evaluates, and samples nothing (it had failed at
    the end: a decoder asked for no new tokens)."""
    run_dir = tmp_path / "run"
    p = run_cli("data=shakespeare", "model=gpt", "data.file=sample_play.txt", "data.url=null",
                "data.sha256=9a40396c5ca5a1c76160dd51e7f0cf3f443787c5d53dc627eca9ba85f8b41bfe", "model.n_layer=1",
                "model.n_embd=32", "model.n_head=2", "model.block_size=16", "train.max_iters=2",
                "train.eval_interval=2", "train.eval_iters=1", "train.batch_size=2", "train.sample_tokens=0",
                "train.progress=false", "logger=none", f"hydra.run.dir={run_dir}")
    assert p.returncode == 0, p.stderr[-3000:]
    r = results(run_dir)
    assert r["status"] == "ok" and r["metrics"]["steps"] == 2 and "sample:" not in p.stdout


def _text_data(tmp_path, text: str) -> list:
    """Overrides that train on `text` as a text data file of the test's own."""
    import hashlib
    (tmp_path / "text.txt").write_text(text, encoding="utf-8")
    return ["data=shakespeare", "model=gpt", f"data.cache_dir={tmp_path}", "data.file=text.txt", "data.url=null",
            f"data.sha256={hashlib.sha256(text.encode()).hexdigest()}", "model.n_layer=1", "model.n_embd=32",
            "model.n_head=2", "model.block_size=16", "train.max_iters=2", "train.eval_interval=2",
            "train.eval_iters=1", "train.batch_size=2", "train.progress=false", "logger=none"]


def test_text_without_a_newline_samples_from_its_first_character(tmp_path):
    """The end-of-training sample's prompt is a newline; a text without one starts from its first
    character instead of failing after the training."""
    run_dir = tmp_path / "run"
    p = run_cli(*_text_data(tmp_path, "abcde fghij. " * 200), "train.sample_tokens=5", f"hydra.run.dir={run_dir}")
    assert p.returncode == 0, p.stderr[-3000:]
    assert results(run_dir)["status"] == "ok"


def test_a_vocabulary_the_decode_path_cannot_sample_is_refused_before_training(tmp_path):
    """decode=persistent samples a row of logits in one program (at most 4,096): a 5,000-character
    text is refused in one line as soon as the data is read, before any training step."""
    text = "".join(chr(0x4E00 + i) for i in range(5000)) * 2
    run_dir = tmp_path / "run"
    p = run_cli(*_text_data(tmp_path, text), "task=generate", "decode=persistent", "train.dtype=float32",
                f"hydra.run.dir={run_dir}", env={"TRITON_INTERPRET": "1"})
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert lines[-1] == ("error: decode=persistent samples a whole row of logits inside its kernels: vocabulary 5000 "
                         "> 4096; use a decode path that samples outside them")
    assert not (run_dir / "ckpt.pt").exists() and "step 0" not in p.stdout
