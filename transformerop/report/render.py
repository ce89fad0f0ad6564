"""The report's faces: the markdown page (header facts, the table, the goals' section) and the
chart -- grouped bars (the baseline's axis as colour, the next swept axis along x, the rest as
panels, each bar labelled with its ratio to the baseline), loss curves, and for bench sweeps a
roofline (each timed region's achieved FLOP/s against the ceilings it was predicted with)."""
import math

import pandas as pd

from .table import METRICS, is_num

NOTE = ("x base: > 1 = better than the baseline row (baseline / row for times and losses, row / baseline "
        "for throughputs and accuracy). ms: median (p25-p75) of the repeats. meas/pred: measured / "
        "predicted (roofline + launch term), ! = flagged. kernel us, GPU busy (when profiled): GPU kernel time per "
        "call or step, and its share of the wall time; far below 100% = host or launch gaps bound it. host us "
        "(bench on CUDA): how long one call holds the calling thread in a loop of back-to-back calls (blocks of 5 "
        "after a sync): the call's host work; none for a call that waits for the GPU. precision: "
        "how the attention's matmuls round (ieee / tf32 / bf16); a ratio across precisions says so in its label.")


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
        out[{"peak_memory_bytes": "peak mem", "attention_backward": "backward"}.get(c, c)] = [fmt(v, c) for v in df[c]]
    if meta["single"]:
        out["region"] = df["region"].fillna("")
    for p in [""] if meta["single"] else [f"{n}_" for n in meta["regions"]]:
        t = p.replace("_", " ")
        none = [None] * len(df)  # a column a region never had
        col = lambda k, p=p, none=none: df.get(f"{p}{k}", none)  # noqa: E731
        out[f"{t}ms (p25-p75)"] = [f"{fmt(m)} ({fmt(a)}-{fmt(b)})" if is_num(m) else "" for m, a, b in
                                   zip(col("median_ms"), col("p25_ms"), col("p75_ms"))]
        out[f"{t}pred ms"] = [fmt(v) for v in col("predicted_ms")]
        out[f"{t}meas/pred"] = [fmt(v) + (" !" if f is True else "")
                                for v, f in zip(col("measured_over_predicted"), col("flagged"))]
        out[f"{t}kernel us"] = [fmt(v) for v in col("kernel_us")]
        out[f"{t}host us"] = [fmt(v) for v in col("host_us")]
        if p:  # single region: gpu_busy is already a column of its own (METRICS)
            out[f"{t}GPU busy"] = [fmt(v, "gpu_busy") for v in col("gpu_busy")]
    for p, _, _ in meta["measures"]:
        out[f"{p.replace('_', ' ')}x base"] = [fmt(v, "x_baseline") + (" (base)" if b else "")
                                               for v, b in zip(df[f"{p}x_baseline"], df["is_baseline"])]
    return out.loc[:, [c for c in out if (out[c].astype(str) != "").any()]]


def to_markdown(df) -> str:
    rows = [list(map(str, df.columns))] + [[fmt(v) for v in row] for row in df.itertuples(index=False)]
    lines = ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join([lines[0], "|" + "---|" * len(df.columns), *lines[1:]])


def markdown(df, meta, facts, image: str, extra=()) -> str:
    f, c = facts, facts["counts"]
    head = {"study": (f["study"] or "-") + (" (smoke: CPU-sized)" if f["smoke"] else ""),
            "baseline": f"`{f['baseline']}`" if f["baseline"] else "none", "command": f"`{f['command']}`",
            "device": f["device"] + (f" (cuda {f['cuda']})" if f["cuda"] else ""),
            "torch": f"{f['torch']} (triton {f['triton']})", "date": f["date"],
            "code": f["code"] if f["clean"] else f"**not a clean commit**: {f['code']}",
            "sweep": f"`{f['sweep']}`",
            "jobs": f"{sum(c.values())}: {c['ok']} ok, {c['failed']} failed, {c['skipped']} skipped"}
    if f.get("after_profiler"):
        head["timed after a profile"] = (f"**{f['after_profiler']} of {sum(c.values())} jobs** timed in a process "
                                         "that had already run torch.profiler, which slows every later launch: "
                                         "their host-bound times read high (sweep.isolate=true runs each job alone)")
    return "\n".join([f"# {f['study'] or 'Sweep'} report", "", "| | |", "|---|---|",
                      *[f"| {k} | {v} |" for k, v in head.items()], "", NOTE, "", to_markdown(display(df, meta)),
                      "", *extra, f"![chart]({image})", ""])


def search_section(sweep_dir, df, records) -> list:
    """A hyper-parameter search's outcome (the optimization_results.yaml Hydra's Optuna sweeper
    writes): its best trial, or its Pareto front, with the job that ran each."""
    from pathlib import Path

    import yaml

    from .table import norm, parse_overrides
    path = Path(sweep_dir) / "optimization_results.yaml"
    if not path.exists():
        return []
    res = yaml.safe_load(path.read_text()) or {}
    solutions = res.get("solutions") or [{"params": res.get("best_params") or {}, "values": [res.get("best_value")]}]
    objectives = ((records[0].get("config") or {}).get("search") or {}).get("objectives") or ["value"]
    lines = ["## Search: " + ("the Pareto front" if len(solutions) > 1 or "solutions" in res else "the best trial"), "",
             "| job | " + " | ".join(objectives) + " | parameters |", "|---|" + "---|" * (len(objectives) + 1)]
    for sol in solutions:
        params = sol.get("params") or {}
        jobs = [r["_job"] for r in records
                if all(norm(parse_overrides(r.get("overrides")).get(k)) == norm(v) for k, v in params.items())]
        values = sol.get("values") or []
        lines.append(f"| {', '.join(jobs) or '?'} | " + " | ".join(fmt(v, o) for v, o in zip(values, objectives))
                     + " | " + " ".join(f"{k}={fmt(v)}" for k, v in params.items()) + " |")
    return lines + [""]


# -- chart -----------------------------------------------------------------------------------------
def val_curve(r) -> list:
    """(step, val loss) of a record's in-loop evals (records before the eval/ names: val_loss)."""
    pts = []
    for h in r.get("history") or []:
        v = h.get("eval/val_loss", h.get("val_loss"))
        if h.get("step") is not None and v is not None:
            pts.append((h["step"], v))
    return pts


def _axes(meta, df) -> tuple:
    """(colour axis, x axis, panel axes): the baseline's key is the colour (what is compared)."""
    names = list(meta["names"].values())
    base_key = (df["baseline"].dropna().astype(str).str.split("=").str[0].tolist() or [""])[0]
    colour = meta["names"].get(base_key) or (names[0] if names else None)
    rest = [n for n in names if n != colour]
    return colour, (rest[0] if rest else None), rest[1:]


def _grouped(ax, d, value, prefix, colour, x, title, unit) -> None:
    """Bars of `value` per x group, one colour per value of `colour`, the ratio written on each."""
    import numpy as np
    xs = list(dict.fromkeys(d[x].astype(str))) if x else [""]
    cs = list(dict.fromkeys(d[colour].astype(str))) if colour else [""]
    width = 0.8 / max(1, len(cs))
    for j, cval in enumerate(cs):
        sub = d[d[colour].astype(str) == cval] if colour else d
        for i, xval in enumerate(xs):
            cell = sub[sub[x].astype(str) == xval] if x else sub
            if cell.empty or not is_num(cell[value].iloc[0]):
                continue
            r = cell.iloc[0]
            pos = i + (j - (len(cs) - 1) / 2) * width
            lo, hi = r.get(f"{prefix}p25_ms"), r.get(f"{prefix}p75_ms")
            err = [[max(0, r[value] - lo)], [max(0, hi - r[value])]] if is_num(lo) and is_num(hi) else None
            ax.bar(pos, r[value], width, yerr=err, capsize=2, color=f"C{j % 10}", label=cval if i == 0 else None,
                   edgecolor="black" if r["is_baseline"] else None, hatch="//" if r["is_baseline"] else None)
            ratio = "base" if r["is_baseline"] else (f"{r[f'{prefix}x_baseline']:.2f}x"
                                                     if is_num(r.get(f"{prefix}x_baseline")) else "")
            ax.annotate(ratio, (pos, r[value]), ha="center", va="bottom", fontsize=6, rotation=90 if len(cs) > 4 else 0,
                        xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(np.arange(len(xs)), [s[:18] for s in xs], fontsize=7)
    vals = d[value][d[value].apply(is_num)]
    if len(vals) and vals.min() > 0 and vals.max() / vals.min() > 30:
        ax.set_yscale("log")
    ax.set(xlabel=x or "", ylabel=unit)
    ax.set_title(title, fontsize=8)
    if colour:
        ax.legend(title=colour, fontsize=6, title_fontsize=7)


def _roofline(ax, df, meta) -> bool:
    """Measured points (arithmetic intensity, achieved FLOP/s) under the ceilings they were
    judged by; colour = the compared axis, marker = the next axis (and the timed region)."""
    import numpy as np
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter
    colour, x, _ = _axes(meta, df)
    prefixes = [""] if meta["single"] else [f"{n}_" for n in meta["regions"]]
    ok = df[df["status"] == "ok"]
    pts = [(r[f"{p}intensity"], r[f"{p}achieved_flops"], str(r[colour]) if colour else "",
            " ".join(filter(None, [str(r[x]) if x else "", p.rstrip("_")]))) for p in prefixes for _, r in ok.iterrows()
           if is_num(r.get(f"{p}intensity")) and is_num(r.get(f"{p}achieved_flops"))]
    if not pts:
        return False
    peaks = {(r.get(f"{p}peak_flops"), r.get(f"{p}bandwidth")) for p in prefixes for _, r in ok.iterrows()
             if is_num(r.get(f"{p}peak_flops")) and is_num(r.get(f"{p}bandwidth"))}
    xs = np.logspace(math.log10(min(p[0] for p in pts) / 4), math.log10(max(p[0] for p in pts) * 4), 100)
    for peak, bw in sorted(peaks):
        ax.plot(xs, np.minimum(peak, bw * xs), color="0.6", lw=1)
        ax.annotate(f"{peak / 1e12:.0f} TFLOP/s, {bw / 1e12:.1f} TB/s", (xs[-1], peak), fontsize=6, ha="right",
                    va="bottom", color="0.4")
    colours = list(dict.fromkeys(p[2] for p in pts))
    markers = list(dict.fromkeys(p[3] for p in pts))
    shapes = "osD^v<>pP*X"
    for inten, flops, c, m in pts:
        ax.scatter(inten, flops, s=22, color=f"C{colours.index(c) % 10}", marker=shapes[markers.index(m) % len(shapes)])
    handles = [Line2D([], [], ls="", marker="o", color=f"C{i % 10}", label=c) for i, c in enumerate(colours) if c]
    handles += [Line2D([], [], ls="", marker=shapes[i % len(shapes)], color="0.3", label=m)
                for i, m in enumerate(markers) if m]
    if handles:
        ax.legend(handles=handles, fontsize=6, ncol=2)
    ax.set(xscale="log", yscale="log", xlabel="FLOP / byte (napkin)", ylabel="achieved FLOP/s")
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_title("roofline: measured points under the ceilings they were predicted with", fontsize=8)
    return True


def chart(df, meta, records, path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = df[df["status"] == "ok"]
    colour, x, rest = _axes(meta, df)
    panels = []
    for prefix, col, _ in meta["measures"]:
        unit = "ms (median, p25-p75)" if col.endswith("median_ms") else col
        groups = [("", ok)] if not rest else list(ok.groupby([ok[k].astype(str) for k in rest], sort=False))
        for key, d in groups:
            values = key if isinstance(key, tuple) else (key,)
            where = " ".join(f"{k}={v}" for k, v in zip(rest, values)) if rest else ""
            name = (prefix.rstrip("_") or (d["region"].iloc[0] if "region" in d and len(d) else col)) + (
                f" ({where})" if where else "")
            panels.append(lambda ax, d=d, p=prefix, c=col, n=name, u=unit: _grouped(ax, d, c, p, colour, x, n, u))
    good = [r for r, s in zip(records, df["status"]) if s == "ok"]
    if any(val_curve(r) for r in good):
        def curves(ax):
            for label, r in zip(ok["label"], good):
                pts = val_curve(r)
                if pts:
                    ax.plot(*zip(*pts), marker=".", label=label[:30])
            ax.set(xlabel="step", ylabel="val loss")
            ax.set_title("loss curves", fontsize=8)
            ax.legend(fontsize=6)
        panels.append(curves)
    if (df["task"] == "bench").any():
        panels.append(lambda ax: _roofline(ax, df, meta) or ax.axis("off"))
    ncols = 1 if len(panels) <= 1 else 2
    nrows = max(1, math.ceil(len(panels) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.5 * ncols, 4.0 * nrows), squeeze=False)
    for ax, draw in zip(axes.flat, panels):
        draw(ax)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if not panels:
        axes[0, 0].text(0.5, 0.5, "no timings or loss curves (no ok jobs)", ha="center", va="center")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
