"""Every study in experiments/ composes (each of its sweep jobs too, and passes the job's config
checks), and its CPU smoke variant (`experiment=smoke/<study>`) runs end to end through the CLI
with a report of one row per job, ratios taken from the baseline row, and failed/skipped rows."""
import itertools
import json
import math
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import ROOT, run_cli
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

from transformerop import report as R

STUDIES = ("quality", "addition", "batched_heads", "softmax_kernels", "attention_kernels", "attention_ladder",
           "kv_cache_regime",
           "graph_overhead", "graphed_decode", "decode_speed", "attention_end_to_end", "timer_distortion", "speedrun")
# One study gets an extra sweep value whose jobs fail their checks: their rows must say why.
PLANTED = ("graph_overhead", "model.n_head=2,3")


def compose_all(names) -> dict:
    """name -> config with the hydra node (compose() leaves hydra.sweeper.params unexpanded)."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return {n: compose("config", overrides=[f"experiment={n}"], return_hydra_config=True) for n in names}


def sweep_axes(cfg) -> dict:
    """hydra.sweeper.params parsed as Hydra's basic sweeper parses them: key -> list of values."""
    params = [f"{k}={v}" for k, v in cfg.hydra.sweeper.params.items()]
    axes = {}
    for o in OverridesParser.create().parse_overrides(params):
        axes[o.get_key_element()] = list(o.sweep_string_iterator()) if o.is_sweep_override() \
            else [o.get_value_element_as_str()]
    return axes


def norm(v):
    return yaml.safe_load(str(v))


def test_one_file_per_study():
    top = {p.stem for p in (ROOT / "experiments").glob("*.yaml")}
    smoke = {p.stem for p in (ROOT / "experiments" / "smoke").glob("*.yaml") if not p.stem.startswith("_")}
    assert top == set(STUDIES) and smoke == set(STUDIES)
    for p in (ROOT / "experiments").rglob("*.yaml"):
        if "results" not in p.relative_to(ROOT / "experiments").parts:  # run outputs, not studies
            assert p.read_text().startswith("# @package _global_\n"), p


def test_every_study_composes_with_a_baseline_among_its_sweep_values():
    cfgs = compose_all(STUDIES + tuple(f"smoke/{s}" for s in STUDIES))
    for name, cfg in cfgs.items():
        study = name.removeprefix("smoke/")
        assert cfg.study.name == study and cfg.study.smoke == name.startswith("smoke/"), name
        axes = sweep_axes(cfg)
        key, value = cfg.study.baseline.split("=", 1)
        assert norm(value) in [norm(v) for v in axes.get(key, [])], (name, cfg.study.baseline, axes)
        if cfg.study.smoke:  # CPU-sized: a tiny model, a few steps, small shapes
            assert cfg.model.n_embd <= 64 and cfg.train.max_iters <= 100 and (cfg.bench.batch_size or 0) <= 8, name
            assert all(norm(v) <= 256 for k in ("bench.rows", "bench.cols") for v in axes.get(k, [])), name


def test_every_full_size_sweep_job_composes_and_passes_its_checks():
    """Each job of each full study as the GPU will run it: it composes and has no config error (a
    backend this CPU lacks may only say BackendUnavailable, i.e. skipped here)."""
    from transformerop.jobs import validate
    from transformerop.model import BackendUnavailable

    cfgs = compose_all(STUDIES)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        for name, cfg in cfgs.items():
            axes = sweep_axes(cfg)
            for values in itertools.product(*axes.values()):
                overrides = [f"experiment={name}"] + [f"{k}={v}" for k, v in zip(axes, values)]
                job = compose("config", overrides=overrides)
                try:
                    validate(job, with_data=False)  # full-size text data need not be here
                except BackendUnavailable:
                    pass


# -- the CPU smoke runs ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    """All smoke studies through the CLI, two at a time (single-threaded each: on a shared CPU a
    descheduled OpenMP thread stalls every op)."""
    root = tmp_path_factory.mktemp("smoke")

    def launch(study):
        extra = [PLANTED[1]] if study == PLANTED[0] else []
        sweep = root / study
        p = run_cli("-m", f"experiment=smoke/{study}", "logger=none", *extra, f"hydra.sweep.dir={sweep}",
                    env={"OMP_NUM_THREADS": "1"})
        return study, (p, sweep)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(launch, STUDIES))


def expected_ratio(rec, records, baseline, column):
    """Recomputed from results.json alone: the ok job equal to this one but for the baseline value."""
    key, value = baseline.split("=", 1)
    mine = {k: norm(v) for k, v in (o.split("=", 1) for o in rec["overrides"])}
    want = {**mine, key: norm(value)}
    base = [b for b in records if b["status"] == "ok"
            and {k: norm(v) for k, v in (o.split("=", 1) for o in b["overrides"])} == want]
    assert len(base) == 1, (rec["overrides"], baseline)

    def value_of(r):
        region = column.removesuffix("x_baseline").rstrip("_")
        if r["timings"] and region not in r["metrics"]:
            t = r["timings"][region] if region in r["timings"] else next(iter(r["timings"].values()))
            return t["median_ms"], R.LOWER
        metric = region if region in r["metrics"] else "wall_s"
        return (r["metrics"].get(metric, r.get("wall_s"))), R.METRICS.get(metric) or R.LOWER

    (m, direction), (b, _) = value_of(rec), value_of(base[0])
    return b / m if direction == R.LOWER else m / b


@pytest.mark.slow
@pytest.mark.parametrize("study", STUDIES)
def test_smoke_study_runs_and_reports(study, smoke_runs):
    p, sweep = smoke_runs[study]
    planted = study == PLANTED[0]
    assert p.returncode == (1 if planted else 0), p.stderr[-3000:]
    jobs = sorted((d for d in sweep.iterdir() if d.name.isdigit()), key=lambda d: int(d.name))
    records = [json.loads((d / "results.json").read_text()) for d in jobs]
    assert records and all({k: r["study"][k] for k in ("name", "baseline", "smoke")} ==
                           {"name": study, "baseline": records[0]["study"]["baseline"], "smoke": True} for r in records)
    assert R.main([str(sweep), "--no-wandb"]) == 0
    df = pd.read_csv(sweep / "report.csv", dtype={"job": str})
    assert list(df["job"]) == [d.name for d in jobs]  # one row per job
    ratio_cols = [c for c in df if c.endswith("x_baseline")]
    assert ratio_cols, df.columns
    checked = 0
    for rec, row in zip(records, df.itertuples()):
        assert row.status == rec["status"]
        if rec["status"] != "ok":
            assert isinstance(row.reason, str) and row.reason, row
            continue
        for col in ratio_cols:
            got = df.at[row.Index, col]
            if not math.isnan(got):
                assert got == pytest.approx(expected_ratio(rec, records, rec["study"]["baseline"], col)), (row, col)
                checked += 1
    assert checked >= 1
    if planted:
        failed = df.loc[df.status == "failed", "reason"]
        assert len(failed) == 4 and failed.str.contains("not divisible by model.n_head=3").all()
        assert (df["status"] == "skipped").any()
    md = (sweep / "report.md").read_text()
    assert f"experiment=smoke/{study}" in md and "(smoke" in md
    png = (sweep / "report.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000


def test_smoke_studies_skip_gpu_only_jobs_with_a_reason(smoke_runs):
    """On a machine without CUDA the GPU-only jobs are skipped (not failed), reason recorded."""
    if _has_cuda():
        pytest.skip("a CUDA device is present: these jobs run")
    for study in ("softmax_kernels", "attention_kernels", "attention_ladder", "graphed_decode", "attention_end_to_end"):
        _, sweep = smoke_runs[study]
        skipped = [json.loads(f.read_text()) for f in Path(sweep).glob("*/results.json")]
        skipped = [r for r in skipped if r["status"] == "skipped"]
        assert skipped and all("CUDA" in r["error"]["message"] for r in skipped), study


def _has_cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def test_the_speedrun_search_pins_the_studys_own_sweep_axes():
    """Optuna reads hydra.sweeper.params merged with the study's: an unpinned study axis
    ("false,true") would become a searched choice."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=speedrun", "hparams_search=speedrun"], return_hydra_config=True)
    params = {k: str(v) for k, v in cfg.hydra.sweeper.params.items()}
    searched = {k for k, v in params.items() if "(" in v}
    assert searched == {"train.lr", "train.warmup_iters"}, params
    assert all("," not in v for k, v in params.items() if k not in searched), params


def test_every_dated_record_is_indexed_and_names_gpu_torch_and_date():
    """experiments/results/README.md lists every record folder (GPU-date[letter]) and every study
    report; each folder's README names its GPU, its torch version and the date of its folder name.
    A record left out of the index, or one that does not say what ran it, is caught."""
    results = ROOT / "experiments" / "results"
    index = (results / "README.md").read_text()
    folders = sorted(d for d in results.iterdir() if d.is_dir())
    assert folders
    for d in folders:
        m = re.fullmatch(r"(h100|h200)-(\d{4}-\d{2}-\d{2})[a-z]?", d.name)
        assert m, f"{d.name}: a record folder is named <gpu>-<yyyy-mm-dd>[letter]"
        assert f"]({d.name}/README.md)" in index, f"{d.name} is missing from experiments/results/README.md"
        head = (d / "README.md").read_text()[:1500]
        assert m.group(1).upper() in head and m.group(2) in head, f"{d.name}/README.md: GPU or date missing at its top"
        assert re.search(r"torch 2\.\d+", head), f"{d.name}/README.md: torch version missing at its top"
    for report in results.glob("*.csv"):
        assert f"]({report.stem}.md)" in index, f"{report.stem} is missing from experiments/results/README.md"
