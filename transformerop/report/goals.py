"""Outside numbers to beat (a study's `study.goals`), set beside ours in the study's report.

Each goal names a report column (`metric`), the rows it is about (`where`: override strings, any
of them may match, empty = every ok row; `exclude`: rows to leave out, such as the baseline), the
outside `reference` and either an absolute `goal` or `goal_x_baseline` (a ratio against the
study's own baseline row). Ours is the best matching row, so
a goal is judged on what the tool can do, and the table says which row that was and by how much a
miss misses; with `every: true` it is the worst matching row, and the goal holds only if every
row meets it (a claim about each size and batch, not about the best of them).
"""
import math

from .kinds import by_kind
from .render import fmt
from .table import HIGHER, LOWER, METRICS, parse_overrides
from .table import holds as _holds
from .table import is_num as _num


def _direction(g, metric: str) -> str:
    return g.get("direction") or METRICS.get(metric) or (LOWER if metric.endswith(("_ms", "_s")) else HIGHER)


def _any(o: dict, where) -> bool:
    where = [where] if isinstance(where, str) else list(where or [])
    return any(_holds(o, parse_overrides(w.split())) for w in where)


def _matches(o: dict, g) -> bool:
    """`where`: any entry holds (each entry: overrides that must all hold); `exclude`: none holds."""
    return (not g.get("where") or _any(o, g["where"])) and not _any(o, g.get("exclude"))


def _timing(r, metric: str) -> dict:
    """The timing row behind a metric: its region's (attention_fwd_median_ms -> attention_fwd), else
    the record's first."""
    timings = r.get("timings") or {}
    return timings.get(metric.removesuffix("_median_ms")) or next(iter(timings.values()), {})


def _phases(r) -> str:
    """A training job's start-up by phase (startup/<phase>_s), longest first."""
    m = r.get("metrics") or {}
    ph = sorted(((k[len("startup/"):-2], v) for k, v in m.items() if k.startswith("startup/") and _num(v)),
                key=lambda kv: -kv[1])
    return "start-up by phase: " + ", ".join(f"{n} {v:.2f} s" for n, v in ph) if ph else ""


ITEMSIZE = {"bfloat16": 2, "float32": 4}  # train.dtype's choices (runtime.DTYPES), without importing torch


def _weights_rate(r, us_per_step: float) -> str:
    """A decode step reads every weight once: params x itemsize over the step's time, the rate to
    set beside the device's memory bandwidth (the cache's reads come on top)."""
    params = (r.get("metrics") or {}).get("params")
    size = ITEMSIZE.get(((r.get("config") or {}).get("train") or {}).get("dtype"))
    if not (_num(params) and size and us_per_step > 0):
        return ""
    return f"; weights read at {params * size / us_per_step / 1e3:,.0f} GB/s"


def _busiest(m: dict, kind: str) -> str:
    """A one-launch phase kind's busiest program's own time in it (the rest: waiting at barriers),
    and that of each of its parts timed apart (phase_work_us_<kind>_<part>)."""
    v = m.get(f"phase_work_us_{kind}")
    parts = "".join(f"; in its {k[len(f'phase_work_us_{kind}_'):]} tiles {p:.1f}" for k, p in m.items()
                    if k.startswith(f"phase_work_us_{kind}_") and _num(p))
    return f" (busiest program {v:.1f}{parts})" if _num(v) else ""


def _bound(r, metric: str) -> str:
    """What the best row's own measurements say bounds it. Start-up: its phases. Otherwise the
    kernel profile's GPU time against the wall time (decode: per token; bench, train: per call or
    step), then the roofline's verdict, MFU and measured/predicted; a time from launch adds the
    start-up part of it."""
    m = r.get("metrics") or {}
    if metric.endswith("startup_s") and _phases(r):
        return _phases(r)
    start = m.get(metric.replace("time_to_target_s", "startup_s")) if metric.endswith("time_to_target_s") else None
    if _num(start):
        return f"{_bound(r, 'train_step_median_ms')}; of the {m[metric]:.2f} s, {start:.2f} s before the first step " \
               f"({_phases(r).removeprefix('start-up by phase: ')})"
    if _num(m.get("phase_us_per_token")):  # one launch: its barriers' time stamps say where the token goes
        kinds = sorted(((k[len("phase_us_"):], v) for k, v in m.items() if k.startswith("phase_us_")
                        and k != "phase_us_per_token" and _num(v)), key=lambda kv: -kv[1])
        empty = f"; an empty grid barrier {m['barrier_us']:.2f} us" if _num(m.get("barrier_us")) else ""
        return (f"in-kernel phases: {m['phase_us_per_token']:.1f} us per decode step over {m['phases_per_token']:.0f} "
                f"grid barriers ({m['phase_us_per_token'] / m['phases_per_token']:.2f} us each): "
                + ", ".join(f"{n} {v:.1f} us" + _busiest(m, n) for n, v in kinds)
                + _weights_rate(r, m["phase_us_per_token"]) + empty)
    if _num(m.get("gpu_busy")):
        return (f"profile: kernels busy {m['gpu_busy']:.0%} of the wall time: {m['kernels_per_token']:.0f} "
                f"kernels, {m['kernel_us_per_token']:.0f} us of kernel time per token")
    t = _timing(r, metric)
    parts = [f"profile: kernels busy {t['gpu_busy']:.0%} of the wall time ({t['kernels']:.0f} kernels, "
             f"{t['kernel_us']:.0f} us of kernel time per call)" if _num(t.get("gpu_busy")) else "",
             f"host {t['host_us']:.0f} us per call" if _num(t.get("host_us")) else "",
             f"roofline: {t['bound']}-bound" if t.get("bound") else "",
             f"MFU {t['mfu']:.0%}" if _num(t.get("mfu")) else "",
             f"measured/predicted {t['measured_over_predicted']:.2f}" if _num(t.get("measured_over_predicted")) else ""]
    return ", ".join(p for p in parts if p)


def _paired(df, i: int, g) -> str:
    """For a goal against the baseline: the kernel (and host) time of the baseline row paired with row i."""
    prefix = g["metric"].removesuffix("median_ms")
    kernel, host = (df[f"{prefix}base_{s}"][i] if f"{prefix}base_{s}" in df else None for s in ("kernel_us", "host_us"))
    if not (g.get("goal_x_baseline") and g["metric"].endswith("median_ms") and _num(kernel)):
        return ""
    host = f", host {host:.0f} us" if _num(host) else ""
    return f"; its paired baseline row: {kernel:.0f} us of kernel time{host} per call"


def judge(g, df, records) -> dict:
    """One goal against the report table: the best matching ok row, its value and the verdict."""
    metric = g["metric"]
    col = metric.replace("median_ms", "x_baseline") if g.get("goal_x_baseline") else metric
    lower = _direction(g, metric) == LOWER and not g.get("goal_x_baseline")
    rows = [i for i, r in enumerate(records) if r.get("status") == "ok" and col in df
            and _num(df[col][i]) and _matches(parse_overrides(r.get("overrides")), g)]
    out = {"what": g.get("what", metric), "reference": g.get("reference"), "note": g.get("note", "")}
    target = g.get("goal_x_baseline") or g.get("goal")
    ran_on = sorted({(r.get("env") or {}).get("device_name") for r in records if r.get("status") == "ok"} - {None})
    if g.get("device") and ran_on and g["device"] not in ran_on:  # a goal holds only where it was measured
        return {**out, "ours": None, "row": "", "bound": "",
                "verdict": f"not judged here (the goal is for {g['device']}; this ran on {', '.join(ran_on)})"}
    if not rows:
        return {**out, "ours": None, "row": "no ok row", "verdict": "not measured", "bound": ""}
    every = bool(g.get("every"))
    better = min if lower else max
    worse = max if lower else min
    best = (worse if every else better)(rows, key=lambda i: df[col][i])  # `every`: the worst row decides
    ours = float(df[col][best])
    met = _meets(ours, target, lower)
    gap = _shortfall(ours, target, lower)
    verdict = "met" if met else f"missed by {gap:.0%}" if math.isfinite(gap) else "missed"
    missed = []
    if every:
        missed = [i for i in rows if not _meets(df[col][i], target, lower)]
        verdict = f"met at all {len(rows)} rows" if met else \
            f"missed at {len(missed)} of {len(rows)} rows; the worst {verdict}"
    out.update(ours=ours, row=df["label"][best], index=best, bound=_bound(records[best], metric) + _paired(df, best, g),
               value=float(df[metric][best]) if metric in df else None, verdict=verdict,
               missed=[(df["label"][i], float(df[col][i]), _shortfall(float(df[col][i]), target, lower),
                        _bound(records[i], metric) + _paired(df, i, g)) for i in missed])
    return out


def _meets(ours: float, target: float, lower: bool) -> bool:
    return ours <= target if lower else ours >= target


def _shortfall(ours: float, target: float, lower: bool) -> float:
    return (ours / target - 1) if lower else (1 - ours / target)


def missed_rows(goals, judged) -> list:
    """Markdown: for each `every` goal, every row that misses it, by how much and what bounds it
    (that row's own measurements), worst first: the goal is about each of them."""
    lines = []
    for g, j in zip(goals, judged):
        if not j.get("missed"):
            continue
        unit = "x baseline" if g.get("goal_x_baseline") else g["metric"]
        lines += [f"**Rows that miss \"{j['what']}\"** (worst first):", "",
                  f"| row | ours ({unit}) | missed by | what bounds it |", "|---|---|---|---|"]
        for label, ours, gap, bound in sorted(j["missed"], key=lambda m: -m[2]):
            lines.append(f"| {label} | {fmt(ours, g['metric']) if not g.get('goal_x_baseline') else f'{ours:.2f}x'} "
                         f"| {gap:.0%} | {bound} |")
        lines.append("")
    return lines


def _kernel_table(r, metric: str):
    """The profiled kernels behind a row's metric (bench: <region>_kernels, train: train_step_kernels,
    decode: kernels), or None when that job was not profiled."""
    tables = r.get("tables") or {}
    region = metric.removesuffix("_median_ms") if metric.endswith("_median_ms") else None
    names = [f"{region}_kernels"] if region else []
    names += [f"{n}_kernels" for n in (r.get("timings") or {})] + ["kernels"]
    return next((tables[n] for n in names if n in tables), None)


def _baseline_kernels(g, df, records) -> str:
    """For a goal against the baseline: that row's own kernel time, the like-for-like GPU figure."""
    if not g.get("goal_x_baseline"):
        return ""
    for i, r in enumerate(records):
        t = _timing(r, g["metric"])
        if df["is_baseline"][i] and _matches(parse_overrides(r.get("overrides")), {"where": g.get("where")}) \
                and _num(t.get("kernel_us")):
            return (f"; the baseline row ({df['label'][i]}) spends {t['kernel_us']:.1f} us in kernels per call, "
                    f"GPU busy {t['gpu_busy']:.0%}")
    return ""


def profiles(goals, judged, df, records, top: int = 5) -> list:
    """Markdown: for each missed goal (judged: judge()'s verdicts) whose best row was profiled,
    that row's top kernels."""
    lines = []
    for g, j in zip(goals, judged):
        if j.get("ours") is None or j["verdict"].startswith("met") or g["metric"].endswith("startup_s"):
            continue  # a start-up's bound is its phases (in the table), not the step's kernels
        t = _kernel_table(records[j["index"]], g["metric"])
        if not t:
            continue
        lines += [f"**Profile of the best row for \"{j['what']}\"** ({j['row']}; top {top} kernels by time)"
                  + _baseline_kernels(g, df, records) + ":", "",
                  "| " + " | ".join(t["columns"]) + " |", "|" + "---|" * len(t["columns"])]
        lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in t["rows"][:top]] + [""]
        kinds = _by_kind(t, _timing(records[j["index"]], g["metric"]).get("kernel_us"))
        lines += [kinds, ""] if kinds else []
    return lines


def _by_kind(t, kernel_us) -> str:
    """A profile's kernel time told by kind (report/kinds.py), each kind's µs, share and
    launches, and what share of the whole kernel time the table covers when it is not all of it
    (a record from before the tables kept every kernel)."""
    rows = by_kind(t["rows"])
    total = sum(us for _, us, _ in rows)
    if not total:
        return ""
    unit = t["columns"][1].removeprefix("us_").replace("_", " ")
    text = "By kind (from the kernels' names), us " + unit + ": " + ", ".join(
        f"{k} {us:,.0f} ({us / total:.0%}, {n:g} launches)" for k, us, n in rows)
    if _num(kernel_us) and total < 0.99 * kernel_us:
        text += f" -- the table's kernels only: {total / kernel_us:.0%} of the {kernel_us:,.0f} us of kernel time"
    return text


def section(goals, df, records) -> list:
    """Markdown lines: one table row per goal, then the profiles of the missed ones (empty when
    the study has no goals)."""
    if not goals:
        return []
    lines = ["## Against the references", "", "| what | reference | goal | ours (best row) | row | verdict | "
             "what bounds it (that row's measurements) | note |", "|---|---|---|---|---|---|---|---|"]
    judged = [judge(g, df, records) for g in goals]
    for g, j in zip(goals, judged):
        metric = g["metric"]
        goal = f"{g['goal_x_baseline']}x baseline" if g.get("goal_x_baseline") else \
            ("<= " if _direction(g, metric) == LOWER else ">= ") + fmt(g.get("goal"), metric)
        ours = "" if j["ours"] is None else (f"{j['ours']:.2f}x ({fmt(j['value'], metric)} {metric})"
                                            if g.get("goal_x_baseline") else f"{fmt(j['ours'], metric)} {metric}")
        lines.append(f"| {j['what']} | {fmt(j['reference'], metric)} | {goal} | {ours} | {j['row']} | "
                     f"{j['verdict']} | {j['bound']} | {j['note']} |")
    return lines + [""] + missed_rows(goals, judged) + profiles(goals, judged, df, records)
