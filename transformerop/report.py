"""Local comparison report over a sweep's results.json files (the report reads nothing else).

    python -m transformerop.report outputs/multirun/<stamp> [more dirs] [--no-wandb] [--publish experiments/results]
    python -m transformerop.report --scorecard experiments/results --readme README.md

One row per job, failed and skipped ones with their reason: the overrides that vary, key metrics,
and per timed region the median with its p25-p75 spread, the prediction and measured/predicted.
`x_baseline` compares with the study's baseline row (`study.baseline`, an override string): of
the ok rows holding that override, the one that agrees with the row on every other swept key.
> 1 always means better: baseline / row for times and losses, row / baseline for throughputs and
accuracy. Jobs with no timed region (train) compare on time to target, exact match or val loss.
Writes report.md / .csv / .png into the first dir (--publish DIR: also DIR/<study>.md and .png)
and logs table and chart to a W&B run in the sweep's group (the sweep's mode, offline by default)
unless --no-wandb, WANDB_MODE=disabled, no wandb package, or the sweep ran with logger=none.
report.md carries its numbers as JSON in an HTML comment: the README scorecard is generated from
experiments/results/*.md, not typed."""
import argparse
import json
import math
import os
import re
import sys
from pathlib import Path

import pandas as pd
import yaml

RESULTS = "results.json"
DATA_RE = re.compile(r"<!-- report-data\n(.*?)\n-->", re.S)
SCORE_START, SCORE_END = "<!-- scorecard:start -->", "<!-- scorecard:end -->"
LOWER, HIGHER = "lower", "higher"  # which way is better
# Metrics shown when any job has them, in this order, with the better direction where it matters.
METRICS = {"precision": None, "attention_backward": None, "params": None, "steps": None, "target_step": None, "time_to_target_s": LOWER, "startup_s": None,
           "val_loss": LOWER, "bits_per_char": LOWER, "best_val_loss": None, "best_step": None,
           "exact_match": HIGHER, "tok_per_s": HIGHER, "decode_tok_per_s": HIGHER, "ms_per_token": LOWER, "setup_s": None,
           "kernels_per_token": None, "kernel_us_per_token": None, "gpu_busy": None,
           "sync_over_one": None, "peak_memory_bytes": None, "wall_s": None}
HEADLINES = ("time_to_target_s", "exact_match", "val_loss")  # for jobs with no timed region
# Model-quality metrics mean something only for train jobs (elsewhere they come from a warm-up fit).
TRAIN_ONLY = ("steps", "target_step", "time_to_target_s", "startup_s", "val_loss", "bits_per_char", "exact_match",
              "best_val_loss", "best_step")
# Tasks whose finding is a ratio inside each job rather than against the baseline row.
WITHIN_JOB = {"profile": ("sync_over_one", "per-phase syncs vs one sync per step")}
NOISE = 0.05  # ratios within 5% of 1 are called no difference
TIMING_KEYS = ("median_ms", "p25_ms", "p75_ms", "predicted_ms", "measured_over_predicted", "flagged",
               "kernel_us", "gpu_busy")  # the last two: bench.profile / train.profile
NOTE = ("x base: > 1 = better than the baseline row (baseline / row for times and losses, row / baseline "
        "for throughputs and accuracy). ms: median (p25-p75) of the repeats. meas/pred: measured / "
        "predicted (roofline + launch term), ! = flagged. kernel us, GPU busy (when profiled): GPU kernel time per "
        "call or step, and its share of the wall time; far below 100% = host or launch gaps bound it.")


class ReportError(Exception):
    """A report that cannot be built: one line for the user, exit code 2."""


# -- reading ---------------------------------------------------------------------------------------
def load_records(paths) -> list:
    """Every results.json under the paths (recursively), each tagged with its job label."""
    records = []
    for root in map(Path, paths):
        if not root.exists():
            raise ReportError(f"{root}: no such file or directory")
        natural = lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.as_posix())]  # noqa: E731
        found = sorted(root.rglob(RESULTS), key=natural) if root.is_dir() else [root]
        for f in found:
            try:
                r = json.loads(f.read_text())
            except (OSError, ValueError) as e:
                r = {"status": "failed", "error": {"message": f"unreadable {RESULTS}: {e}"}}
            if r.get("task") == "report":  # a report job's own record is not a row
                continue
            rel = f.parent.relative_to(root).as_posix() if root.is_dir() else f.parent.name
            r["_job"] = (f"{root.name}/" if len(paths) > 1 else "") + (rel if rel != "." else root.name)
            records.append(r)
    if not records:
        raise ReportError(f"no {RESULTS} under {' '.join(map(str, paths))}: "
                          "give a sweep dir such as outputs/multirun/<stamp>")
    return records


def parse_overrides(items) -> dict:
    pairs = (str(s).split("=", 1) for s in items or [] if "=" in str(s))
    return {k.lstrip("+~"): v for k, v in pairs}


def norm(value):
    """Override values compared as Hydra reads them ('false' == 'False')."""
    try:
        v = yaml.safe_load(str(value)) if value is not None else None
    except yaml.YAMLError:
        return str(value)
    return v if v is None or isinstance(v, (bool, int, float, str)) else str(value)


def short_names(keys) -> dict:
    """'experiment/backend' -> 'backend', 'bench.target' -> 'target', unless two keys collide."""
    tail = {k: re.split(r"[./]", k)[-1] for k in keys}
    return {k: t if list(tail.values()).count(t) == 1 else k for k, t in tail.items()}


def _study(r) -> dict:
    return r.get("study") or {}


def _baseline_pairs(r) -> dict:
    return parse_overrides(str(_study(r).get("baseline") or "").split())


def _holds(o: dict, pairs: dict) -> bool:
    return all(norm(o.get(k)) == norm(v) for k, v in pairs.items())


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# -- the table -------------------------------------------------------------------------------------
def _row(r, o, swept, names, single) -> dict:
    msg = str((r.get("error") or {}).get("message") or "").strip() if r.get("status") != "ok" else ""
    row = {"job": r["_job"], "status": r.get("status", "failed"), "reason": msg.splitlines()[0][:160] if msg else ""}
    row.update({names[k]: o.get(k, "") for k in swept})
    row["label"] = " ".join(f"{names[k]}={o.get(k, '-')}" for k in swept) or r["_job"]
    metrics = {**(r.get("metrics") or {}), "wall_s": r.get("wall_s")}
    row.update({k: metrics.get(k) for k in METRICS if r.get("task") == "train" or k not in TRAIN_ONLY})
    for name, t in (r.get("timings") or {}).items():
        p = "" if single else f"{name}_"
        row.update({"region": name} if single else {})
        # never blank a metric of the same name (single region: decode's gpu_busy is a metric)
        row.update({f"{p}{k}": t.get(k) for k in TIMING_KEYS if t.get(k) is not None or f"{p}{k}" not in row})
    return row


def _measures(records, regions, single, df) -> list:
    """(column prefix, value column, direction) of every quantity that gets an x_baseline column."""
    train = any(r.get("task") == "train" for r in records)  # judged on its outcome, not its step time
    if single and not train:
        return [("", "median_ms", LOWER)]
    if regions and not train:
        return [(f"{n}_", f"{n}_median_ms", LOWER) for n in regions]
    for m in HEADLINES:
        if m in df and df[m].notna().any():
            return [(f"{m}_", m, METRICS[m])]
    if any(((r.get("config") or {}).get("train") or {}).get("target_loss") for r in records):
        return [("wall_s_", "wall_s", LOWER)]  # time to target with no metric of its own
    return []


def _baseline_index(i, records, ovs, swept):
    """The ok row of the same study that holds the baseline override and agrees with row i on
    every other swept key and on the timed region."""
    r, pairs = records[i], _baseline_pairs(records[i])
    others = [k for k in swept if k not in pairs]
    for j, (b, o) in enumerate(zip(records, ovs)):
        if (pairs and b.get("status") == "ok" and _study(b).get("name") == _study(r).get("name")
                and _holds(o, pairs) and all(norm(o.get(k)) == norm(ovs[i].get(k)) for k in others)
                and list(b.get("timings") or {})[:1] == list(r.get("timings") or {})[:1]):
            return j
    return None


def _ratio(mine, theirs, direction) -> float:
    if not (_num(mine) and _num(theirs)) or mine <= 0 or theirs <= 0:
        return math.nan
    return theirs / mine if direction == LOWER else mine / theirs


def build(records) -> tuple:
    """(DataFrame, one row per job; meta). Numeric columns stay numeric for the CSV."""
    ovs = [parse_overrides(r.get("overrides")) for r in records]
    keys = list(dict.fromkeys(k for o in ovs for k in o))
    swept = [k for k in keys if len({norm(o.get(k)) for o in ovs}) > 1]
    names = short_names(swept)
    regions = list(dict.fromkeys(n for r in records for n in (r.get("timings") or {})))
    single = bool(regions) and all(len(r.get("timings") or {}) <= 1 for r in records)
    df = pd.DataFrame([_row(r, o, swept, names, single) for r, o in zip(records, ovs)])
    df = df.drop(columns=[c for c in METRICS if c in df and df[c].isna().all()])
    measures = _measures(records, regions, single, df)
    base = [_baseline_index(i, records, ovs, swept) for i in range(len(records))]
    for prefix, col, direction in measures:
        df[f"{prefix}x_baseline"] = [_ratio(df[col][i], df[col][b], direction) if b is not None and
                                     records[i].get("status") == "ok" else math.nan for i, b in enumerate(base)]
    df["is_baseline"] = [bool(_baseline_pairs(r)) and _holds(o, _baseline_pairs(r)) for r, o in zip(records, ovs)]
    if "precision" in df:  # a ratio across precisions is not like for like: the label says so
        df["label"] = [lab + (f" [{p} vs {df['precision'][b]}]" if b is not None and isinstance(p, str)
                              and isinstance(df["precision"][b], str) and p != df["precision"][b] else "")
                       for lab, p, b in zip(df["label"], df["precision"], base)]
    return df, {"swept": swept, "names": names, "common": {k: v for k, v in ovs[0].items() if k not in swept},
                "single": single, "regions": regions, "measures": measures}


# -- markdown --------------------------------------------------------------------------------------
def fmt(v, col: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return ("yes" if v else "") if isinstance(v, bool) else str(v).replace("|", "\\|").replace("\n", " ")
    if col.endswith("x_baseline"):
        return f"{v:.2f}x" if v >= 0.1 else f"{v:.2g}x"
    special = {"params": lambda: f"{v / 1e6:.2f}M" if v >= 1e5 else f"{v:,}",
               "peak_memory_bytes": lambda: f"{v / 2**20:,.0f} MiB", "exact_match": lambda: f"{v:.1%}",
               "gpu_busy": lambda: f"{v:.0%}"}
    if col in special:
        return special[col]()
    return f"{v:,}" if isinstance(v, int) else f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def display(df, meta) -> pd.DataFrame:
    """The markdown view: median and spread in one cell, flags beside meas/pred, units."""
    out = df[["job", "status", "reason", *meta["names"].values()]].copy()
    for c in (c for c in METRICS if c in df):
        out[{"peak_memory_bytes": "peak mem"}.get(c, c)] = [fmt(v, c) for v in df[c]]
    if meta["single"]:
        out["region"] = df["region"].fillna("")
    for p in [""] if meta["single"] else [f"{n}_" for n in meta["regions"]]:
        t = p.replace("_", " ")
        out[f"{t}ms (p25-p75)"] = [f"{fmt(m)} ({fmt(a)}-{fmt(b)})" if _num(m) else "" for m, a, b in
                                   zip(df[f"{p}median_ms"], df[f"{p}p25_ms"], df[f"{p}p75_ms"])]
        out[f"{t}pred ms"] = [fmt(v) for v in df[f"{p}predicted_ms"]]
        out[f"{t}meas/pred"] = [fmt(v) + (" !" if f is True else "")
                                for v, f in zip(df[f"{p}measured_over_predicted"], df[f"{p}flagged"])]
        none = [None] * len(df)  # (single region: a column named like a dropped all-empty metric)
        out[f"{t}kernel us"] = [fmt(v) for v in df.get(f"{p}kernel_us", none)]
        if p:  # single region: gpu_busy is already a column of its own (METRICS)
            out[f"{t}GPU busy"] = [fmt(v, "gpu_busy") for v in df.get(f"{p}gpu_busy", none)]
    for p, _, _ in meta["measures"]:
        out[f"{p.replace('_', ' ')}x base"] = [fmt(v, "x_baseline") + (" (base)" if b else "")
                                               for v, b in zip(df[f"{p}x_baseline"], df["is_baseline"])]
    return out.loc[:, [c for c in out if (out[c].astype(str) != "").any()]]


def to_markdown(df) -> str:
    rows = [list(map(str, df.columns))] + [[fmt(v) for v in row] for row in df.itertuples(index=False)]
    lines = ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join([lines[0], "|" + "---|" * len(df.columns), *lines[1:]])


def _facts(records, meta, paths) -> dict:
    """Header facts; a study's command is its constant overrides (the axes live in its file)."""
    env = next((r["env"] for r in records if r.get("env")), {})
    study = next((_study(r) for r in records if _study(r).get("name")), {})
    ovs = [parse_overrides(r.get("overrides")) for r in records]
    axes = [] if study.get("name") else [f"{k}={','.join(dict.fromkeys(str(o.get(k, '')) for o in ovs))}"
                                         for k in meta["swept"]]
    devices = sorted({(r.get("env") or {}).get("device_name") for r in records} - {None})
    prov = provenance(records)
    return {"code": prov["text"], "clean": prov["clean"], "study": study.get("name") or "", "smoke": bool(study.get("smoke")), "baseline": study.get("baseline") or "",
            "command": " ".join(["python run.py -m", *(f"{k}={v}" for k, v in meta["common"].items()), *axes]),
            "device": ", ".join(devices) or "unknown", "cuda": env.get("cuda"), "torch": env.get("torch"),
            "triton": env.get("triton"), "git_sha": env.get("git_sha"), "task": records[0].get("task"),
            "date": min((r.get("started") or "9999") for r in records)[:10], "sweep": " ".join(map(str, paths)),
            "counts": {s: sum(r.get("status") == s for r in records) for s in ("ok", "failed", "skipped")}}


def commits_by_tree() -> dict:
    """tree hash -> the newest commit of this repo that has it (where the report runs)."""
    from .runtime import _git
    try:
        out = _git("log", "--all", "--format=%H %T").stdout.decode().split("\n")
    except (OSError, ValueError):
        return {}
    found = {}
    for line in out:
        if " " in line:
            commit, tree = line.split()
            found.setdefault(tree, commit)
    return found


def provenance(records) -> dict:
    """Which code ran. A record's git_tree (the hash of its files as they were) names the commit
    with that tree, even when the machine that ran it had a stale .git; without a tree, HEAD and
    its dirty flag are all there is (records from before the flag count as unknown, never clean)."""
    trees = commits_by_tree()
    commits, dirty, unknown = set(), set(), False
    for r in records:
        e = r.get("env") or {}
        if not e:
            continue
        if e.get("git_tree"):
            if e["git_tree"] in trees:
                commits.add(trees[e["git_tree"]])
            else:
                dirty.add(e.get("git_diff_sha256") or e["git_tree"][:16])
                commits.add(e.get("git_commit") or "unknown")
        else:
            commits.add(e.get("git_commit") or e.get("git_sha") or "unknown")
            if e.get("git_dirty"):
                dirty.add(e.get("git_diff_sha256"))
            elif e.get("git_dirty") is None:
                unknown = True
    dirty.discard(None)
    clean = not dirty and not unknown and "unknown" not in commits
    text = ", ".join(sorted(c[:7] for c in commits)) or "unknown"
    if dirty:
        text += f" with uncommitted changes (diff {', '.join(sorted(dirty))})"
    elif unknown:
        text += " (clean or not: not recorded)"
    else:
        text += " (clean)"
    return {"commits": sorted(commits), "clean": clean, "text": text}


def markdown(df, meta, facts, image: str, extra=()) -> str:
    f, c = facts, facts["counts"]
    head = {"study": (f["study"] or "-") + (" (smoke: CPU-sized)" if f["smoke"] else ""),
            "baseline": f"`{f['baseline']}`" if f["baseline"] else "none", "command": f"`{f['command']}`",
            "device": f["device"] + (f" (cuda {f['cuda']})" if f["cuda"] else ""),
            "torch": f"{f['torch']} (triton {f['triton']})", "date": f["date"],
            "code": f["code"] if f["clean"] else f"**not a clean commit**: {f['code']}",
            "sweep": f"`{f['sweep']}`",
            "jobs": f"{sum(c.values())}: {c['ok']} ok, {c['failed']} failed, {c['skipped']} skipped"}
    data = {**f, "names": meta["names"], "within": WITHIN_JOB.get(f["task"]),
            "measures": [{"prefix": p, "column": col, "direction": d} for p, col, d in meta["measures"]],
            "rows": df.astype(object).where(df.notna(), None).to_dict("records")}
    return "\n".join([f"# {f['study'] or 'Sweep'} report", "", "| | |", "|---|---|",
                      *[f"| {k} | {v} |" for k, v in head.items()], "", NOTE, "", to_markdown(display(df, meta)),
                      "", *extra, f"![chart]({image})", "", "<!-- report-data", json.dumps(data, default=str),
                      "-->", ""])


# -- chart -----------------------------------------------------------------------------------------
def _bars(ax, df, rows, p: str, title: str) -> None:
    med, lo, hi = (df[f"{p}{k}"][rows] for k in ("median_ms", "p25_ms", "p75_ms"))
    x = list(range(len(med)))
    ax.bar(x, med, yerr=[(med - lo).clip(lower=0).fillna(0), (hi - med).clip(lower=0).fillna(0)], capsize=3,
           color=["0.6" if b else "C0" for b in df["is_baseline"][rows]])
    ax.set_xticks(x, df["label"][rows], rotation=35, ha="right", fontsize=7)
    ax.set(ylabel="ms (median, p25-p75)", yscale="log" if med.min() > 0 and med.max() / med.min() > 30 else "linear")
    ax.set_title(f"{title} (grey = baseline)", fontsize=9)


def val_curve(r) -> list:
    """(step, val loss) of a record's in-loop evals (records before the eval/ names: val_loss)."""
    pts = []
    for h in r.get("history") or []:
        v = h.get("eval/val_loss", h.get("val_loss"))
        if h.get("step") is not None and v is not None:
            pts.append((h["step"], v))
    return pts


def _curves(ax, df, records) -> None:
    for label, r in zip(df["label"], records):
        pts = val_curve(r)
        if pts:
            ax.plot(*zip(*pts), marker=".", label=label)
    ax.set(xlabel="step", ylabel="val loss")
    ax.set_title("loss curves", fontsize=9)
    ax.legend(fontsize=7)


def chart(df, meta, records, path: Path, title: str) -> None:
    """Bars for every timed region (spread as error bars), lines for loss curves."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = df["status"] == "ok"
    panels = []
    for n in meta["regions"]:
        p = "" if meta["single"] else f"{n}_"
        rows = ok & df[f"{p}median_ms"].notna() & ((df["region"] == n) if meta["single"] else True)
        if rows.any():
            panels.append(lambda ax, rows=rows, p=p, n=n: _bars(ax, df, rows, p, n))
    good = [r if g else {} for r, g in zip(records, ok)]
    if any(val_curve(r) for r in good):
        panels.append(lambda ax: _curves(ax, df, good))
    ncols = 1 if len(panels) <= 1 else 2
    nrows = max(1, math.ceil(len(panels) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.5 * ncols, 4.2 * nrows), squeeze=False)
    for ax, draw in zip(axes.flat, panels):
        draw(ax)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if not panels:
        axes[0, 0].text(0.5, 0.5, "no timings or loss curves (no ok jobs)", ha="center", va="center")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- W&B and the whole report ----------------------------------------------------------------------
def log_wandb(df, png: Path, md: Path, records, out_dir: Path, facts) -> str:
    """One W&B run in the sweep's group with the table and the chart. Never fails the report."""
    logger = (records[0].get("config") or {}).get("logger") or {}
    mode = os.environ.get("WANDB_MODE") or logger.get("mode") or "offline"
    if mode == "disabled" or logger.get("name") == "none":
        return "W&B: off (the sweep ran with logger=none or W&B disabled)"
    try:
        import wandb
    except ImportError:
        return "W&B: not installed, skipped"
    info = next((r["wandb"] for r in records if (r.get("wandb") or {}).get("group")), {})
    group = info.get("group") or "/".join(filter(None, [facts["study"], out_dir.name]))
    try:
        run = wandb.init(project=info.get("project") or logger.get("project") or "transformerop",
                         entity=logger.get("entity"), group=group, job_type="report", name=f"{group}/report",
                         dir=str(out_dir), mode=mode, config=facts, reinit="create_new",
                         settings=wandb.Settings(console="off", x_disable_stats=True))
        table = wandb.Table(dataframe=df.astype(object).where(df.notna(), None).astype(str))
        run.log({"report": table, "report_chart": wandb.Image(str(png))})
        run.save(str(md), base_path=str(out_dir), policy="now")
        run.finish()
        return f"W&B ({mode}): run {run.id} in group {group} under {out_dir / 'wandb'}"
    except Exception as e:  # noqa: BLE001 -- a report without W&B is still a report
        return f"W&B: logging failed ({type(e).__name__}: {e}); the local report is complete"


def report(paths, use_wandb: bool = True, publish=None, allow_dirty: bool = False) -> dict:
    """Build and write the report of the sweep dir(s); returns the files, table and facts.
    Publishing refuses records of uncommitted code unless allow_dirty (the header then says so)."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise ReportError("give at least one sweep dir")
    records = load_records(paths)
    df, meta = build(records)
    facts = _facts(records, meta, paths)
    if publish and not facts["clean"] and not allow_dirty:
        raise ReportError(f"--publish: these records are not from a clean commit ({facts['code']}); rerun from "
                          "a clean commit, or pass --allow-dirty to publish them labelled as such")
    out = paths[0] if paths[0].is_dir() else paths[0].parent
    md, csv, png = out / "report.md", out / "report.csv", out / "report.png"
    chart(df, meta, records, png, f"{facts['study'] or out.name} on {facts['device']}" + " (smoke)" * facts["smoke"])
    df.to_csv(csv, index=False)
    from .goals import section  # outside references to beat, where the study names them
    extra = section(next((_study(r)["goals"] for r in records if _study(r).get("goals")), []), df, records)
    md.write_text(markdown(df, meta, facts, png.name, extra))
    if publish and facts["study"]:
        pub = Path(publish)
        pub.mkdir(parents=True, exist_ok=True)
        (pub / f"{facts['study']}.png").write_bytes(png.read_bytes())
        (pub / f"{facts['study']}.md").write_text(markdown(df, meta, facts, f"{facts['study']}.png", extra))
    wb = log_wandb(df, png, md, records, out, facts) if use_wandb else "W&B: off (--no-wandb)"
    return {"df": df, "meta": meta, "facts": facts, "md": md, "csv": csv, "png": png, "wandb": wb,
            "table": display(df, meta)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m transformerop.report", description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="*", help="sweep dirs (outputs/multirun/<stamp>), searched recursively")
    p.add_argument("--no-wandb", action="store_true", help="do not log the report to W&B")
    p.add_argument("--publish", metavar="DIR", help="also write DIR/<study>.md and .png (experiments/results)")
    p.add_argument("--allow-dirty", action="store_true", help="with --publish: accept records of uncommitted code")
    p.add_argument("--scorecard", metavar="DIR", help="print the README scorecard built from DIR/*.md")
    p.add_argument("--readme", metavar="FILE", help="with --scorecard: rewrite FILE's scorecard block instead")
    a = p.parse_args(argv)
    from .scorecard import scorecard, update_readme  # the README block lives in its own module
    try:
        if a.scorecard:
            block = scorecard(a.scorecard)
            if a.readme and update_readme(a.readme, block):
                print(f"updated the scorecard block in {a.readme}")
            else:
                print(f"{a.readme}: no {SCORE_START} / {SCORE_END} markers; the block:\n" * bool(a.readme) + block)
            return 0
        if not a.paths:
            raise ReportError("give a sweep dir: python -m transformerop.report outputs/multirun/<stamp>")
        out = report(a.paths, use_wandb=not a.no_wandb, publish=a.publish, allow_dirty=a.allow_dirty)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(to_markdown(out["table"]))
    print(f"\nwrote {out['md']}, {out['csv']}, {out['png']}\n{out['wandb']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
