"""The README scorecard (change -> measured -> verdict, one line per study), generated from the
report tables published beside each study's page (experiments/results/<study>.csv), so no
number in it is typed by hand:

    python -m transformerop.report --scorecard experiments/results --readme README.md
"""
import datetime
from pathlib import Path

import pandas as pd

from .render import fmt
from .table import NOISE, WITHIN_JOB, ReportError, is_num, measure_column, parse_overrides, short_names

SCORE_START, SCORE_END = "<!-- scorecard:start -->", "<!-- scorecard:end -->"


def _measures(df) -> list:
    return [c[: -len("x_baseline")] for c in df if c.endswith("x_baseline")]


def _entries(df) -> list:
    """(label, ratio, note) per ok non-baseline row: against the baseline, or within the job."""
    rows = df[df["status"] == "ok"]
    within = WITHIN_JOB.get(str(df["task"].iloc[0]))
    if within:
        return [(r["label"], r[within[0]], "") for _, r in rows.iterrows() if is_num(r.get(within[0]))]
    out, measures = [], _measures(df)
    for prefix in measures:
        col, tag = measure_column(prefix), f" {prefix.rstrip('_')}" if len(measures) > 1 else ""
        for _, r in rows[~rows["is_baseline"]].iterrows():
            x = r[f"{prefix}x_baseline"]
            if not is_num(x):
                continue
            note = "" if col.endswith("median_ms") else f" ({col} {fmt(r[f'{prefix}base'], col)} -> {fmt(r[col], col)})"
            out.append((r["label"] + tag, x, note))
    return out


def _verdict(entries, within: bool) -> str:
    if not entries:
        return "no ok rows to compare"
    best, worst = max(entries, key=lambda e: e[1]), min(entries, key=lambda e: e[1])
    if within:
        return (f"syncs inflate the step by up to {best[1] - 1:.0%}" if best[1] >= 1 + NOISE
                else "no distortion beyond 5%")
    wins, losses = best[1] >= 1 + NOISE, worst[1] <= 1 - NOISE
    if wins:
        return (f"depends: best {best[0]} {best[1]:.2f}x, worst {worst[0]} {worst[1]:.2f}x" if losses
                else f"better than baseline everywhere: best {best[0]} {best[1]:.2f}x")
    return "baseline stays best" if losses else "no difference beyond 5%"


def scorecard_line(df, link: str) -> str:
    """One study's line, from its report table (report.csv or the published <study>.csv)."""
    first = df.iloc[0]
    within = WITHIN_JOB.get(str(first["task"]))
    entries = _entries(df)
    ranked = sorted(entries, key=lambda e: -e[1])
    shown = entries if len(entries) <= 6 else ranked[:3] + [("...", None, "")] + ranked[-2:]
    measured = "; ".join(lab if r is None else f"{lab}: {r:.2f}x{note}" for lab, r, note in shown) or "-"
    baseline = str(first["baseline"]) if isinstance(first["baseline"], str) else ""
    keys = [k for k in str(first["swept_keys"]).split(",") if k] if isinstance(first["swept_keys"], str) else []
    names = short_names(keys)
    tried = {k: list(dict.fromkeys(str(v) for v in df.loc[~df["is_baseline"], names[k]]))
             for k in parse_overrides(baseline.split()) if k in names}
    change = within[1] if within else "; ".join(f"{k}={', '.join(v)}" for k, v in tried.items()) or \
        "only the baseline ran"
    change += "" if within else f" vs `{baseline}`"
    # the page's name: a study's own, or the name a renamed study's page took with it
    study = f"[{Path(link).stem}]({link})" + (" (smoke)" if bool(first["smoke"]) else "")
    devices = ", ".join(sorted({str(d) for d in df["device"] if isinstance(d, str)})) or "unknown"
    return f"| {study} | {change} | {measured} | {_verdict(entries, bool(within))} | {devices} |"


def read_table(path) -> pd.DataFrame:
    df = pd.read_csv(path, dtype={"job": str})
    df["is_baseline"] = df["is_baseline"].astype(bool)
    return df


def scorecard(results_dir) -> str:
    """The README scorecard block, one line per study, from <results_dir>/<study>.csv."""
    d = Path(results_dir)
    if not d.is_dir():
        raise ReportError(f"{d}: no such directory (it holds one report per study)")
    tables = [(f, read_table(f)) for f in sorted(d.glob("*.csv"))]
    lines = [scorecard_line(df, f.with_suffix(".md").as_posix()) for f, df in tables if len(df)]
    if not lines:
        raise ReportError(f"no study reports in {d}: `python -m transformerop.report <sweep dir> --publish {d}`")
    return "\n".join(["| study | change | measured (x baseline, > 1 = better) | verdict | device |",
                      "|---|---|---|---|---|", *lines, "", f"Generated on {datetime.date.today()} by "
                      f"`python -m transformerop.report --scorecard {d.as_posix()} --readme README.md`."])


def update_readme(readme, block: str) -> bool:
    """Rewrite only the text between the scorecard markers; False if they are absent."""
    path = Path(readme)
    text = path.read_text() if path.exists() else ""
    start, end = text.find(SCORE_START), text.find(SCORE_END)
    if start < 0 or end < start:
        return False
    path.write_text(text[:start + len(SCORE_START)] + "\n" + block + "\n" + text[end:])
    return True
