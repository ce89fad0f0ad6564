"""The comparison table: one flat row per job (results.json's `row`), the overrides that vary as
columns, and for each compared quantity the baseline row's value merged in beside it.

`x_baseline` compares with the study's baseline row (`study.baseline`, an override string): the
ok row holding that override that agrees with the row on every other swept key (and, in a
one-region sweep, on the region). > 1 always means better: baseline / row for times and losses,
row / baseline for throughputs and accuracy. Jobs with no timed region (train) compare on time to
target, exact match or val loss."""
import json
import math
import re
from pathlib import Path

import pandas as pd
import yaml

from ..tracking import RESULTS, flat_row

LOWER, HIGHER = "lower", "higher"  # which way is better
# Metrics shown when any job has them, in this order, with the better direction where it matters.
METRICS = {"precision": None, "attention_backward": None, "params": None, "steps": None, "target_step": None,
           "time_to_target_s": LOWER, "startup_s": None, "val_loss": LOWER, "bits_per_char": LOWER,
           "best_val_loss": None, "best_step": None, "exact_match": HIGHER, "tok_per_s": HIGHER,
           "decode_tok_per_s": HIGHER, "ms_per_token": LOWER, "setup_s": None, "kernels_per_token": None,
           "kernel_us_per_token": None, "gpu_busy": None, "sync_over_one": None, "peak_memory_bytes": None,
           "wall_s": None}
HEADLINES = ("time_to_target_s", "exact_match", "val_loss")  # for jobs with no timed region
# Model-quality metrics mean something only for train jobs (elsewhere they come from a warm-up fit).
TRAIN_ONLY = ("steps", "target_step", "time_to_target_s", "startup_s", "val_loss", "bits_per_char", "exact_match",
              "best_val_loss", "best_step")
# Tasks whose finding is a ratio inside each job rather than against the baseline row.
WITHIN_JOB = {"profile": ("sync_over_one", "per-phase syncs vs one sync per step")}
NOISE = 0.05  # ratios within 5% of 1 are called no difference
TIMING_KEYS = ("median_ms", "p25_ms", "p75_ms", "predicted_ms", "measured_over_predicted", "flagged",
               "kernel_us", "gpu_busy",  # bench.profile / train.profile
               "host_us",  # bench on CUDA: the host's share of one call
               "intensity", "achieved_flops", "peak_flops", "bandwidth")  # the roofline chart
# legacy metric names in records written before decode throughput had its own key
LEGACY = {"generate": {"tok_per_s": "decode_tok_per_s"}}


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
            if f.parent.name == "attempts":  # earlier attempts kept beside a job's record
                continue
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


def study_of(r) -> dict:
    return r.get("study") or {}


def baseline_pairs(r) -> dict:
    return parse_overrides(str(study_of(r).get("baseline") or "").split())


def holds(o: dict, pairs: dict) -> bool:
    return all(norm(o.get(k)) == norm(v) for k, v in pairs.items())


def is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def row_of(r) -> dict:
    """The job's flat row: as the job wrote it, or made the same way for older records (their
    precision label asked of the backend class the config names, as the job would have)."""
    row = dict(r.get("row") or flat_row(r.get("metrics") or {}, r.get("timings") or {}))
    for old, new in LEGACY.get(r.get("task"), {}).items():
        if old in row and new not in row:
            row[new] = row.pop(old)
    cfg = r.get("config") or {}
    if "precision" not in row and (cfg.get("attention") or {}).get("name") and cfg.get("train"):
        from omegaconf import OmegaConf

        from ..model import get_backend
        try:
            device = (r.get("env") or {}).get("device") or "cpu"
            row["precision"] = get_backend(cfg["attention"]["name"]).precision(
                cfg["train"]["dtype"], OmegaConf.create(cfg["attention"]), device.split(":")[0])
        except (ValueError, KeyError, ImportError):
            pass
    return row


# -- the table -------------------------------------------------------------------------------------
def _row(r, o, swept, names, single) -> dict:
    msg = str((r.get("error") or {}).get("message") or "").strip() if r.get("status") != "ok" else ""
    env, study = r.get("env") or {}, study_of(r)
    out = {"job": r["_job"], "status": r.get("status", "failed"), "reason": msg.splitlines()[0][:160] if msg else "",
           "task": r.get("task"), "study": study.get("name") or "", "baseline": study.get("baseline") or "",
           "smoke": bool(study.get("smoke")), "device": env.get("device_name"), "swept_keys": ",".join(swept),
           "run_id": (r.get("wandb") or {}).get("run_id")}
    out.update({names[k]: o.get(k, "") for k in swept})
    out["label"] = " ".join(f"{names[k]}={o.get(k, '-')}" for k in swept) or r["_job"]
    row = {**row_of(r), "wall_s": r.get("wall_s")}
    out.update({k: row.get(k) for k in METRICS if r.get("task") == "train" or k not in TRAIN_ONLY})
    for region in r.get("timings") or {}:
        p = "" if single else f"{region}_"
        out.update({"region": region} if single else {})
        # never blank a metric of the same name (single region: decode's gpu_busy is a metric)
        out.update({f"{p}{k}": row.get(f"{region}_{k}") for k in TIMING_KEYS
                    if row.get(f"{region}_{k}") is not None or f"{p}{k}" not in out})
    return out


def measure_column(prefix: str) -> str:
    """The value column behind `<prefix>x_baseline`: a metric's own, or a region's median."""
    metric = prefix.rstrip("_")
    return metric if metric in METRICS else f"{prefix}median_ms"


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


def _ratio(mine, theirs, direction) -> float:
    if not (is_num(mine) and is_num(theirs)) or mine <= 0 or theirs <= 0:
        return math.nan
    return theirs / mine if direction == LOWER else mine / theirs


def build(records) -> tuple:
    """(DataFrame, one row per job; meta). Each compared quantity gets its baseline row's value
    (`<prefix>base`, merged on the study, the other swept keys and the region) and the ratio."""
    ovs = [parse_overrides(r.get("overrides")) for r in records]
    keys = list(dict.fromkeys(k for o in ovs for k in o))
    swept = [k for k in keys if len({norm(o.get(k)) for o in ovs}) > 1]
    names = short_names(swept)
    regions = list(dict.fromkeys(n for r in records for n in (r.get("timings") or {})))
    single = bool(regions) and all(len(r.get("timings") or {}) <= 1 for r in records)
    df = pd.DataFrame([_row(r, o, swept, names, single) for r, o in zip(records, ovs)])
    df = df.drop(columns=[c for c in METRICS if c in df and df[c].isna().all()])
    measures = _measures(records, regions, single, df)
    pairs = [baseline_pairs(r) for r in records]
    df["is_baseline"] = [bool(p) and holds(o, p) for o, p in zip(ovs, pairs)]
    # merge keys: the study, every swept key that is not a baseline key (as Hydra reads its value), the region
    match = [k for k in swept if not any(k in p for p in pairs)]
    on = ["study"] + [f"_k{i}" for i in range(len(match))] + (["region"] if single else [])
    for i, k in enumerate(match):
        df[f"_k{i}"] = [str(norm(o.get(k))) for o in ovs]
    if single:
        df["region"] = df["region"].fillna("")
    base = df[df["is_baseline"] & (df["status"] == "ok")].drop_duplicates(on)
    for prefix, col, direction in measures:
        if col not in df:
            df[col] = math.nan
        merged = df[on].merge(base[on + [col]].rename(columns={col: f"{prefix}base"}), on=on, how="left")
        df[f"{prefix}base"] = merged[f"{prefix}base"].to_numpy()
        df[f"{prefix}x_baseline"] = [_ratio(v, b, direction) if s == "ok" else math.nan
                                     for v, b, s in zip(df[col], df[f"{prefix}base"], df["status"])]
        for stat in ("kernel_us", "host_us"):  # the paired baseline's kernel and host time too (like for like)
            if f"{prefix}{stat}" in df:
                paired = base[on + [f"{prefix}{stat}"]].rename(columns={f"{prefix}{stat}": "_b"})
                df[f"{prefix}base_{stat}"] = df[on].merge(paired, on=on, how="left")["_b"].to_numpy()
    if "precision" in df:  # a ratio across precisions is not like for like: the label says so
        bp = df[on].merge(base[on + ["precision"]].rename(columns={"precision": "_bp"}), on=on, how="left")["_bp"]
        df["label"] = [lab + (f" [{p} vs {b}]" if isinstance(p, str) and isinstance(b, str) and p != b else "")
                       for lab, p, b in zip(df["label"], df["precision"], bp)]
    df = df.drop(columns=[c for c in df if c.startswith("_k")])
    return df, {"swept": swept, "names": names, "common": {k: v for k, v in ovs[0].items() if k not in swept},
                "single": single, "regions": regions, "measures": measures}


# -- what the header says --------------------------------------------------------------------------
def commits_by_tree() -> dict:
    """tree hash -> the newest commit of this repo that has it (where the report runs)."""
    from ..runtime import _git
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


def facts(records, meta, paths) -> dict:
    """Header facts; a study's command is its constant overrides (the axes live in its file)."""
    env = next((r["env"] for r in records if r.get("env")), {})
    study = next((study_of(r) for r in records if study_of(r).get("name")), {})
    ovs = [parse_overrides(r.get("overrides")) for r in records]
    axes = [] if study.get("name") else [f"{k}={','.join(dict.fromkeys(str(o.get(k, '')) for o in ovs))}"
                                         for k in meta["swept"]]
    devices = sorted({(r.get("env") or {}).get("device_name") for r in records} - {None})
    prov = provenance(records)
    return {"study": study.get("name") or "", "smoke": bool(study.get("smoke")),
            "baseline": study.get("baseline") or "",
            "command": " ".join(["python run.py -m", *(f"{k}={v}" for k, v in meta["common"].items()), *axes]),
            "device": ", ".join(devices) or "unknown", "cuda": env.get("cuda"), "torch": env.get("torch"),
            "triton": env.get("triton"), "code": prov["text"], "clean": prov["clean"], "commits": prov["commits"],
            "task": records[0].get("task"), "date": min((r.get("started") or "9999") for r in records)[:10],
            "sweep": " ".join(map(str, paths)),
            "counts": {s: sum(r.get("status") == s for r in records) for s in ("ok", "failed", "skipped")},
            "after_profiler": sum(after_profiler(r) for r in records)}


def after_profiler(r) -> bool:
    """A job whose timings ran in a process that had already run torch.profiler (measure/timing.py)."""
    return any(t.get("after_profiler") or t.get("host_after_profiler") for t in (r.get("timings") or {}).values()
               if isinstance(t, dict))
