"""The README scorecard (change -> measured -> verdict, one line per study), generated from the
machine-readable data that every published report (experiments/results/<study>.md) carries, so
no number in it is typed by hand:

    python -m transformerop.report --scorecard experiments/results --readme README.md
"""
import datetime
import json
from pathlib import Path

from .report import (DATA_RE, LOWER, NOISE, SCORE_END, SCORE_START, ReportError, _num, fmt,
                     parse_overrides)


def _entries(data) -> list:
    """(label, ratio, note) per ok non-baseline row: against the baseline, or within the job."""
    rows = [r for r in data["rows"] if r["status"] == "ok"]
    if data.get("within"):
        return [(r["label"], r[data["within"][0]], "") for r in rows if _num(r.get(data["within"][0]))]
    out = []
    for m in data["measures"]:
        col, tag = m["column"], f" {m['prefix'].rstrip('_')}" if len(data["measures"]) > 1 else ""
        for r in (r for r in rows if not r["is_baseline"] and _num(r.get(f"{m['prefix']}x_baseline"))):
            x = r[f"{m['prefix']}x_baseline"]
            base = r[col] * x if m["direction"] == LOWER else r[col] / x  # the ratio gives the baseline back
            note = "" if col.endswith("median_ms") else f" ({col} {fmt(base, col)} -> {fmt(r[col], col)})"
            out.append((r["label"] + tag, x, note))
    return out


def _verdict(entries, within: bool) -> str:
    if not entries:
        return "no ok rows to compare"
    best, worst = max(entries, key=lambda e: e[1]), min(entries, key=lambda e: e[1])
    if within:
        return f"syncs inflate the step by up to {best[1] - 1:.0%}" if best[1] >= 1 + NOISE else "no distortion beyond 5%"
    wins, losses = best[1] >= 1 + NOISE, worst[1] <= 1 - NOISE
    if wins:
        return (f"depends: best {best[0]} {best[1]:.2f}x, worst {worst[0]} {worst[1]:.2f}x" if losses
                else f"better than baseline everywhere: best {best[0]} {best[1]:.2f}x")
    return "baseline stays best" if losses else "no difference beyond 5%"


def scorecard_line(data, link: str) -> str:
    entries = _entries(data)
    ranked = sorted(entries, key=lambda e: -e[1])
    shown = entries if len(entries) <= 6 else ranked[:3] + [("...", None, "")] + ranked[-2:]
    measured = "; ".join(lab if r is None else f"{lab}: {r:.2f}x{note}" for lab, r, note in shown) or "-"
    names = data.get("names") or {}
    tried = {k: list(dict.fromkeys(str(r.get(names.get(k), "")) for r in data["rows"] if not r["is_baseline"]))
             for k in parse_overrides(data["baseline"].split())}
    change = data["within"][1] if data.get("within") else "; ".join(
        f"{k}={', '.join(v)}" for k, v in tried.items() if k in names) or "only the baseline ran"
    change += "" if data.get("within") else f" vs `{data['baseline']}`"
    study = f"[{data['study']}]({link})" + (" (smoke)" if data.get("smoke") else "")
    return f"| {study} | {change} | {measured} | {_verdict(entries, bool(data.get('within')))} | {data['device']} |"


def scorecard(results_dir) -> str:
    """The README scorecard block, one line per study, from the report data in <results_dir>/*.md."""
    d = Path(results_dir)
    if not d.is_dir():
        raise ReportError(f"{d}: no such directory (it holds one report per study)")
    found = [(f, DATA_RE.search(f.read_text())) for f in sorted(d.glob("*.md"))]
    lines = [scorecard_line(json.loads(m.group(1)), f.as_posix()) for f, m in found if m]
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
