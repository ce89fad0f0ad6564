"""The comparison report on hand-made results.json files: ratios against the baseline row, failed
and skipped rows, the chart, errors for empty dirs, W&B offline, the scorecard and the README block."""
import json
import math
import subprocess
import sys

import pandas as pd
import pytest
from conftest import ROOT, run_cli

from transformerop import report as R
from transformerop.report import scorecard as S

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ENV = {"device_name": "NVIDIA H200", "torch": "2.11.0", "triton": "3.6.0", "cuda": "13.0", "git_sha": "abc1234",
       "git_commit": "abc1234" + "0" * 33, "git_dirty": False, "git_diff_sha256": None}


def timing(median, spread=0.1, predicted=None):
    return {"median_ms": median, "p25_ms": median - spread, "p75_ms": median + spread, "repeats": 20,
            "predicted_ms": predicted, "measured_over_predicted": median / predicted if predicted else None,
            "flagged": False}


def job(sweep, num, overrides, study=("demo", "decode=recompute"), status="ok", timings=None, metrics=None,
        history=None, error=None, logger="none", task="bench", goals=(), tables=None, env=ENV, dtype=None):
    d = sweep / str(num)
    d.mkdir(parents=True)
    record = {"status": status, "error": {"type": "RuntimeError", "message": error, "traceback": ""} if error else None,
              "task": task, "overrides": ["experiment=" + study[0], *overrides],
              "study": {"name": study[0], "baseline": study[1], "smoke": False, "goals": list(goals)}, "tags": [],
              "config": {"logger": {"name": logger, "mode": "offline", "project": "transformerop-test"},
                         "train": {"target_loss": None, **({"dtype": dtype} if dtype else {})}},
              "metrics": metrics or {}, "timings": timings or {}, "tables": tables or {}, "history": history or [],
              "env": env, "wandb": {"mode": "off"}, "job_dir": str(d), "started": "2026-11-30T12:00:00", "wall_s": 1.5}
    (d / "results.json").write_text(json.dumps(record))


@pytest.fixture
def decode_sweep(tmp_path):
    """decode x size with one failed and one skipped job; the baseline is decode=recompute."""
    sweep = tmp_path / "2026-11-30_12-00-00"
    medians = {("recompute", "small"): 10.0, ("kv_cache", "small"): 8.0, ("recompute", "big"): 40.0,
               ("kv_cache", "big"): 10.0}
    n = 0
    for (dec, size), ms in medians.items():
        job(sweep, n, [f"decode={dec}", f"experiment/regime={size}"], timings={"generate": timing(ms, 0.5, ms / 2)},
            metrics={"tok_per_s": 1000 / ms})
        n += 1
    job(sweep, n, ["decode=static_graph", "experiment/regime=small"], status="skipped",
        error="decode=static_graph needs CUDA (CUDA graphs)\nsecond line")
    job(sweep, n + 1, ["decode=static", "experiment/regime=small"], status="failed", error="boom: planted failure")
    return sweep


def test_table_ratios_reasons_and_files(decode_sweep):
    out = R.report([decode_sweep], use_wandb=False)
    df = pd.read_csv(out["csv"])
    assert len(df) == 6 and list(df["job"].astype(str)) == [str(i) for i in range(6)]
    by = {(r.decode, r.regime): r for r in df.itertuples()}
    # times: baseline median / row median, matched on the other swept key (regime)
    assert by["kv_cache", "small"].x_baseline == pytest.approx(10.0 / 8.0)
    assert by["kv_cache", "big"].x_baseline == pytest.approx(40.0 / 10.0)
    assert by["recompute", "big"].x_baseline == pytest.approx(1.0) and by["recompute", "big"].is_baseline
    assert by["kv_cache", "small"].measured_over_predicted == pytest.approx(2.0)
    assert by["static_graph", "small"].status == "skipped"
    assert by["static_graph", "small"].reason == "decode=static_graph needs CUDA (CUDA graphs)"
    assert by["static", "small"].status == "failed" and "planted failure" in by["static", "small"].reason
    assert math.isnan(by["static", "small"].x_baseline)
    md = out["md"].read_text()
    for needle in ("# demo report", "NVIDIA H200", "2.11.0", "2026-11-30", "`python run.py -m experiment=demo`",
                   "`decode=recompute`", "planted failure", "baseline / row for times", "1.25x", "4.00x"):
        assert needle in md, needle
    assert "<!--" not in md  # nothing hidden: the numbers are the table, and the CSV beside it
    assert set(df["study"]) == {"demo"} and len(df) == 6
    png = out["png"].read_bytes()
    assert png[:8] == PNG_MAGIC and len(png) > 1000


def test_throughput_accuracy_ratio_is_row_over_baseline(tmp_path):
    sweep = tmp_path / "s"
    for i, (seed, em) in enumerate([(1337, 0.8), (2, 0.9)]):
        job(sweep, i, [f"seed={seed}"], study=("addition", "seed=1337"), task="train",
            metrics={"exact_match": em, "val_loss": 1.0 + i, "params": 101888},
            history=[{"step": s, "val_loss": 2.0 - s / 10} for s in (0, 5, 10)])
    df, meta = R.build(R.load_records([sweep]))
    assert meta["measures"] == [("exact_match_", "exact_match", R.HIGHER)]
    assert df["exact_match_x_baseline"].tolist() == pytest.approx([1.0, 0.9 / 0.8])
    out = R.report([sweep], use_wandb=False)
    assert "0.10M" in out["md"].read_text() and out["png"].read_bytes()[:8] == PNG_MAGIC


def test_multi_region_jobs_get_a_ratio_per_region(tmp_path):
    sweep = tmp_path / "s"
    for i, (backend, fwd, bwd) in enumerate([("sdpa", 1.0, 4.0), ("cuda_v5", 0.5, 8.0)]):
        job(sweep, i, [f"experiment/backend={backend}"], study=("ak", "experiment/backend=sdpa"),
            timings={"attention_fwd": timing(fwd, 0.01), "attention_fwd_bwd": timing(bwd, 0.01)})
    df, _ = R.build(R.load_records([sweep]))
    assert df["attention_fwd_x_baseline"].tolist() == pytest.approx([1.0, 2.0])
    assert df["attention_fwd_bwd_x_baseline"].tolist() == pytest.approx([1.0, 0.5])
    line = S.scorecard_line(S.read_table(R.report([sweep], use_wandb=False)["csv"]), "ak.md")
    assert "backend=cuda_v5 attention_fwd: 2.00x" in line and "depends" in line


def test_the_header_says_how_many_jobs_were_timed_after_a_profile(tmp_path):
    """A job timed after a torch.profiler session in its process (a sweep without isolation) is
    counted in the header; a sweep without one says nothing."""
    sweep, clean = tmp_path / "s", tmp_path / "c"
    for i, backend in enumerate(["sdpa", "triton"]):
        late = dict(timing(1.0, 0.01), host_us=50.0, **({"host_after_profiler": True} if i else {}))
        job(sweep, i, [f"attention={backend}"], study=("ak", "attention=sdpa"), timings={"attention_fwd": late})
        job(clean, i, [f"attention={backend}"], study=("ak", "attention=sdpa"), timings={"attention_fwd": timing(1.0)})
    md = (R.report([sweep], use_wandb=False)["md"]).read_text()
    assert "| timed after a profile | **1 of 2 jobs** timed in a process that had already run torch.profiler" in md
    assert "host us" in md and "timed after a profile" not in R.report([clean], use_wandb=False)["md"].read_text()


def test_a_missed_row_names_its_paired_baseline_kernel_time(tmp_path):
    """A kernel goal against the baseline: each missing row's bound ends with the kernel time of
    the baseline row of its own shape, not of another one."""
    goals = [{"what": "fwd everywhere", "metric": "attention_fwd_median_ms", "exclude": "attention=sdpa",
              "goal_x_baseline": 1.0, "every": True}]
    sweep = tmp_path / "s"
    rows = [("sdpa", 256, 0.02, 20.0), ("sdpa", 2048, 0.5, 490.0), ("triton", 256, 0.025, 24.0),
            ("triton", 2048, 0.6, 590.0)]
    for i, (att, t, ms, kus) in enumerate(rows):
        tm = dict(timing(ms, 0.001), kernel_us=kus, kernels=1, gpu_busy=kus / (ms * 1e3), host_us=kus / 10)
        job(sweep, i, [f"attention={att}", f"bench.seq_len={t}"], study=("ak", "attention=sdpa"), goals=goals,
            timings={"attention_fwd": tm, "attention_fwd_bwd": timing(4 * ms, 0.001)})
    md = R.report([sweep], use_wandb=False)["md"].read_text()
    missed = {ln.split(" | ")[0].lstrip("| "): ln for ln in md.splitlines() if ln.startswith("| attention=triton")}
    assert "its paired baseline row: 20 us of kernel time, host 2 us per call |" in missed["attention=triton seq_len=256"]
    assert "its paired baseline row: 490 us of kernel time, host 49 us per call |" in \
        missed["attention=triton seq_len=2048"]


def test_train_jobs_compare_on_their_outcome_not_their_step_time(tmp_path):
    sweep = tmp_path / "s"
    for i, (model, loss, ms) in enumerate([("bigram", 2.5, 1.0), ("gpt", 1.5, 30.0)]):
        job(sweep, i, [f"model={model}"], study=("quality", "model=bigram"), task="train",
            metrics={"val_loss": loss}, timings={"train_step": timing(ms)})
    df, meta = R.build(R.load_records([sweep]))
    assert meta["measures"] == [("val_loss_", "val_loss", R.LOWER)]
    assert df["val_loss_x_baseline"].tolist() == pytest.approx([1.0, 2.5 / 1.5])


def test_goals_set_the_best_matching_row_beside_the_reference(tmp_path):
    goals = [{"what": "decode bf16", "metric": "tok_per_s", "reference": 4944, "goal": 20000},
             {"what": "graph over recompute", "metric": "median_ms", "where": "decode=static_graph",
              "reference": 4.2, "goal_x_baseline": 4.2},
             {"what": "any cache, fast", "metric": "median_ms", "exclude": ["decode=recompute"], "goal": 5.0},
             {"what": "nothing ran", "metric": "tok_per_s", "where": "decode=fused", "goal": 1.0}]
    sweep = tmp_path / "s"
    for i, (dec, ms) in enumerate([("recompute", 2.0), ("static_graph", 0.25), ("compiled", 0.04)]):
        job(sweep, i, [f"decode={dec}"], study=("decode_speed", "decode=recompute"), goals=goals,
            timings={"generate": timing(ms, 0.01, ms / 2)}, metrics={"tok_per_s": 1000 / ms})
    md = R.report([sweep], use_wandb=False)["md"].read_text()
    lines = {ln.split(" | ")[0].lstrip("| "): ln for ln in md.splitlines() if ln.startswith("| ")}
    assert "## Against the references" in md
    assert "| 4,944 | >= 20,000 | 25,000 tok_per_s | decode=compiled | met |" in lines["decode bf16"]
    assert "measured/predicted 2.00 |" in lines["decode bf16"]  # what bounds it: the row's own numbers
    assert "| 4.2 | 4.2x baseline | 8.00x (0.25 median_ms) | decode=static_graph | met |" in lines["graph over recompute"]
    assert "| 0.04 median_ms | decode=compiled | met |" in lines["any cache, fast"]
    assert "| not measured |" in lines["nothing ran"]
    goals[0]["goal"] = 50000  # 25,000 / 50,000: half of it is missing
    (sweep / "0" / "results.json").write_text((sweep / "0" / "results.json").read_text().replace("20000", "50000"))
    assert "| decode=compiled | missed by 50% |" in R.report([sweep], use_wandb=False)["md"].read_text()


def test_an_every_row_goal_is_judged_on_its_worst_row_against_the_paired_baseline(tmp_path):
    """`every: true`: each persistent row against the compiled row of its own batch size; the
    worst decides, and the bound is that row's in-kernel phase profile."""
    goals = [{"what": "1.5x compiled everywhere", "metric": "median_ms", "where": "decode=persistent",
              "goal_x_baseline": 1.5, "every": True}]
    sweep = tmp_path / "s"
    phases = {"phase_us_per_token": 40.0, "phases_per_token": 20, "phase_us_attn": 25.0, "phase_us_head": 15.0,
              "params": 1e6, "barrier_us": 0.8, "phase_work_us_attn": 21.5,  # 2 MB of bf16 weights in 40 us: 50 GB/s
              "phase_work_us_attn_qkv": 12.0}  # a part of the attn phase timed apart
    rows = [("compiled", 1, 2.0, {}), ("compiled", 4, 2.0, {}), ("persistent", 1, 0.5, phases),
            ("persistent", 4, 1.6, phases)]
    for i, (dec, b, ms, extra) in enumerate(rows):
        job(sweep, i, [f"decode={dec}", f"generate.batch_size={b}"], study=("decode_speed", "decode=compiled"),
            goals=goals, timings={"generate": timing(ms, 0.01)}, metrics={"tok_per_s": 1000 * b / ms, **extra},
            dtype="bfloat16")
    md = R.report([sweep], use_wandb=False)["md"].read_text()
    line = next(ln for ln in md.splitlines() if ln.startswith("| 1.5x compiled everywhere"))
    assert "| 1.25x (1.6 median_ms) |" in line  # the worst row (batch 4: 2.0 / 1.6), not the best (4x)
    assert "| missed at 1 of 2 rows; the worst missed by 17% |" in line
    assert "in-kernel phases: 40.0 us per decode step over 20 grid barriers (2.00 us each): attn 25.0 us (busiest " \
        "program 21.5; in its qkv tiles 12.0), head 15.0 us; weights read at 50 GB/s; an empty grid barrier 0.80 us |" \
        in line
    # each missing row, by how much and what bounds it; a row that meets the goal is not listed
    misses = md.split('**Rows that miss "1.5x compiled everywhere"** (worst first):')[1].split("\n\n")[1].splitlines()
    assert misses[2:] == ["| decode=persistent batch_size=4 | 1.25x | 17% | in-kernel phases: 40.0 us per decode step "
                          "over 20 grid barriers (2.00 us each): attn 25.0 us (busiest program 21.5; in its qkv tiles "
                          "12.0), head 15.0 us; "
                          "weights read at 50 GB/s; an empty grid barrier 0.80 us |"]
    goals[0]["goal_x_baseline"] = 1.2
    for i in range(4):
        f = sweep / str(i) / "results.json"
        f.write_text(f.read_text().replace('"goal_x_baseline": 1.5', '"goal_x_baseline": 1.2'))
    md = R.report([sweep], use_wandb=False)["md"].read_text()
    assert "| met at all 2 rows |" in md and "Rows that miss" not in md


def test_start_up_goals_are_bounded_by_their_phases(tmp_path):
    """A start-up goal's bound is the row's phases, longest first (no step kernel table under it);
    a time from launch says how much of it came before the first step."""
    goals = [{"what": "start", "metric": "startup_s", "goal": 3.0},
             {"what": "to target", "metric": "time_to_target_s", "goal": 14.0}]
    sweep = tmp_path / "s"
    kernels = {"train_step_kernels": {"columns": ["kernel", "us_per_step"], "rows": [["k", 9.0]]}}
    for i, graph in enumerate(("false", "true")):
        job(sweep, i, [f"train.cuda_graph={graph}"], study=("speedrun", "train.cuda_graph=false"), goals=goals,
            task="train", tables=kernels, timings={"train_step": timing(5.0)},
            metrics={"startup_s": 4.0 + i, "time_to_target_s": 15.0 - i, "startup/imports_s": 2.5,
                     "startup/capture_s": 1.0 * i, "startup/data_s": 0.5})
    md = R.report([sweep], use_wandb=False)["md"].read_text()
    lines = {ln.split(" | ")[0].lstrip("| "): ln for ln in md.splitlines() if ln.startswith("| ")}
    assert "| start-up by phase: imports 2.50 s, data 0.50 s, capture 0.00 s |" in lines["start"]
    assert "of the 14.00 s, 5.00 s before the first step (imports 2.50 s, capture 1.00 s, data 0.50 s) |" \
        in lines["to target"]
    assert 'best row for "start"' not in md  # a missed start-up gets no step kernel table


def test_a_missed_goal_shows_its_rows_kernel_profile_beside_the_baselines(tmp_path):
    """bench.profile rows: the bound column reads the profile, and a miss lists the row's top
    kernels with the baseline row's own kernel time (the like-for-like GPU figure)."""
    goals = [{"what": "fwd vs sdpa", "metric": "attention_fwd_median_ms", "exclude": ["attention=sdpa"],
              "reference": 0.026, "goal_x_baseline": 1.0}]
    cols = ["kernel", "us_per_call", "launches_per_call", "median_us"]
    sweep = tmp_path / "s"
    for i, (name, ms, kern) in enumerate([("sdpa", 0.027, 21.7), ("triton", 0.030, 24.8)]):
        t = {**timing(ms, 0.001, ms / 2), "kernel_us": kern, "kernels": 1, "gpu_busy": kern / (ms * 1e3)}
        job(sweep, i, [f"attention={name}"], study=("attn", "attention=sdpa"), goals=goals,
            timings={"attention_fwd": t, "attention_fwd_bwd": timing(ms * 4, 0.001, ms)},
            tables={"attention_fwd_kernels": {"columns": cols, "rows": [[f"{name}_fwd_kernel", kern, 1, kern]]}})
    md = R.report([sweep], use_wandb=False)["md"].read_text()
    row = next(ln for ln in md.splitlines() if ln.startswith("| fwd vs sdpa"))
    assert "| 0.90x (0.03 attention_fwd_median_ms) | attention=triton | missed by 10% |" in row
    assert "profile: kernels busy 83% of the wall time (1 kernels, 25 us of kernel time per call)" in row
    assert "the baseline row (attention=sdpa) spends 21.7 us in kernels per call, GPU busy 80%" in md
    assert "| triton_fwd_kernel | 24.8 | 1 | 24.8 |" in md and "| sdpa_fwd_kernel |" not in md
    assert "By kind (from the kernels' names), us per call: attention 25 (100%, 1 launches)\n" in md


def test_empty_or_missing_dir_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "empty", tmp_path / "missing"):
        assert R.main([str(path), "--no-wandb"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and len(err.splitlines()) == 1 and str(path) in err
    p = subprocess.run([sys.executable, "-m", "transformerop.report", str(tmp_path / "missing")], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.strip() == f"error: {tmp_path / 'missing'}: no such file or directory"


def test_wandb_offline_run_in_the_sweep_group(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    sweep = tmp_path / "sweep"
    for i, dec in enumerate(("recompute", "kv_cache")):
        job(sweep, i, [f"decode={dec}"], timings={"generate": timing(10.0 - i)}, logger="wandb")
    out = R.report([sweep])
    assert out["wandb"].startswith("W&B (offline)") and "group demo/sweep" in out["wandb"], out["wandb"]
    assert len(list((sweep / "wandb").glob("offline-run-*"))) == 1
    assert R.report([sweep], use_wandb=False)["wandb"] == "W&B: off (--no-wandb)"


def test_scorecard_generated_into_the_readme_block(decode_sweep, tmp_path, capsys):
    results = tmp_path / "results"
    R.report([decode_sweep], use_wandb=False, publish=results)
    assert (results / "demo.md").exists() and (results / "demo.png").read_bytes()[:8] == PNG_MAGIC
    block = S.scorecard(results)
    lines = [line for line in block.splitlines() if line.startswith("| [")]
    assert len(lines) == 1 and "[demo](" in lines[0] and "decode=kv_cache, static_graph, static vs" in lines[0]
    assert "4.00x" in lines[0] and "better than baseline everywhere" in lines[0]
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\nbefore\n{R.SCORE_START}\nold table\n{R.SCORE_END}\nafter\n")
    assert R.main(["--scorecard", str(results), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith(f"# Title\nbefore\n{R.SCORE_START}\n") and text.endswith(f"{R.SCORE_END}\nafter\n")
    assert "old table" not in text and lines[0] in text
    plain = tmp_path / "PLAIN.md"
    plain.write_text("no markers here\n")
    capsys.readouterr()
    assert R.main(["--scorecard", str(results), "--readme", str(plain)]) == 0
    assert plain.read_text() == "no markers here\n" and lines[0] in capsys.readouterr().out
    assert R.main(["--scorecard", str(tmp_path / "nowhere")]) == 2


def test_report_task_reads_the_sweep_from_config_or_environment(decode_sweep, tmp_path):
    job = tmp_path / "job"
    p = run_cli("task=report", "logger=none", f"hydra.run.dir={job}",
                env={"TRANSFORMEROP_REPORT_PATH": str(decode_sweep)})
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads((job / "results.json").read_text())
    assert r["status"] == "ok" and r["metrics"]["report_jobs"] == 6 and r["metrics"]["report_failed"] == 1
    assert len(r["tables"]["report"]["rows"]) == 6 and (decode_sweep / "report.md").exists()
    assert (job / "report.png").read_bytes()[:8] == PNG_MAGIC
    p = run_cli("task=report", "logger=none", f"hydra.run.dir={tmp_path / 'bad'}",
                env={"TRANSFORMEROP_REPORT_PATH": str(tmp_path / "missing")})
    assert p.returncode == 2 and "report.path: no such directory" in p.stderr
    p = run_cli("task=report", "logger=none", f"report.path={decode_sweep}", f"hydra.run.dir={tmp_path / 'cfg'}")
    assert p.returncode == 0 and json.loads((tmp_path / "cfg" / "results.json").read_text())["metrics"]["report_jobs"] == 6


def test_publish_refuses_records_of_uncommitted_code_unless_told(tmp_path):
    sweep = tmp_path / "sweep"
    dirty = {**ENV, "git_dirty": True, "git_diff_sha256": "feedbeef"}
    job(sweep, 0, ["decode=recompute"], timings={"generate": timing(10.0)})
    job(sweep, 1, ["decode=kv_cache"], timings={"generate": timing(5.0)}, env=dirty)
    with pytest.raises(R.ReportError, match="not from a clean commit.*feedbeef"):
        R.report([sweep], use_wandb=False, publish=tmp_path / "pub")
    assert not (tmp_path / "pub").exists()
    out = R.report([sweep], use_wandb=False, publish=tmp_path / "pub", allow_dirty=True)
    text = (tmp_path / "pub" / "demo.md").read_text()
    assert "| code | **not a clean commit**: abc1234 with uncommitted changes (diff feedbeef) |" in text
    assert out["facts"]["clean"] is False
    clean = tmp_path / "clean"
    for i, dec in enumerate(("recompute", "kv_cache")):
        job(clean, i, [f"decode={dec}"], timings={"generate": timing(10.0 - i)})
    R.report([clean], use_wandb=False, publish=tmp_path / "pub2")
    assert "| code | abc1234 (clean) |" in (tmp_path / "pub2" / "demo.md").read_text()


def test_rows_of_another_precision_say_so(tmp_path):
    sweep = tmp_path / "sweep"
    job(sweep, 0, ["attention=sdpa"], study=("demo", "attention=sdpa"), timings={"attention_fwd": timing(10.0)},
        metrics={"precision": "ieee", "attention_backward": "autograd"})
    job(sweep, 1, ["attention=triton"], study=("demo", "attention=sdpa"), timings={"attention_fwd": timing(5.0)},
        metrics={"precision": "tf32", "attention_backward": "kernel"})
    out = R.report([sweep], use_wandb=False)
    df = out["df"]
    assert list(df["label"]) == ["attention=sdpa", "attention=triton [tf32 vs ieee]"]
    assert list(df["precision"]) == ["ieee", "tf32"] and list(df["attention_backward"]) == ["autograd", "kernel"]
