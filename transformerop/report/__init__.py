"""Local comparison report over a sweep's results.json files (the report reads nothing else).

    python -m transformerop.report outputs/multirun/<stamp> [more dirs] [--no-wandb] [--publish experiments/results]
    python -m transformerop.report --scorecard experiments/results --readme README.md

One row per job (table.py: failed and skipped ones with their reason), each compared quantity
beside its baseline row's value and the ratio, the goals the study names (goals.py), a chart
(render.py). Writes report.md / .csv / .png into the first dir (--publish DIR: also
DIR/<study>.md, .csv and .png, refused for records of uncommitted code unless --allow-dirty) and
logs table, chart and files to a W&B run in the sweep's group that lists the sweep's runs (the
sweep's mode, offline by default) unless --no-wandb, WANDB_MODE=disabled, no wandb package, or the
sweep ran with logger=none. The README scorecard (scorecard.py) is built from the published CSVs."""
import argparse
import logging
import os
from pathlib import Path

from .goals import section
from .render import chart as draw_chart
from .render import display, fmt, markdown, search_section, to_markdown, val_curve
from .scorecard import SCORE_END, SCORE_START
from .table import (
    HIGHER,
    LOWER,
    METRICS,
    NOISE,
    ReportError,
    build,
    facts,
    load_records,
    parse_overrides,
    provenance,
    study_of,
)

log = logging.getLogger(__name__)
__all__ = ["report", "build", "load_records", "main", "ReportError", "LOWER", "HIGHER", "METRICS", "NOISE",
           "SCORE_START", "SCORE_END", "fmt", "display", "to_markdown", "markdown", "parse_overrides", "provenance",
           "val_curve"]


def log_wandb(df, files, records, out_dir: Path, f) -> str:
    """One W&B run in the sweep's group with the table, the chart and the report's files, listing
    the sweep's own runs (their ids are a column of the table). Never fails the report."""
    logger = (records[0].get("config") or {}).get("logger") or {}
    mode = os.environ.get("WANDB_MODE") or logger.get("mode") or "offline"
    if mode == "disabled" or logger.get("name") == "none":
        return "W&B: off (the sweep ran with logger=none or W&B disabled)"
    try:
        import wandb
    except ImportError:
        return "W&B: not installed, skipped"
    info = next((r["wandb"] for r in records if (r.get("wandb") or {}).get("group")), {})
    group = info.get("group") or "/".join(filter(None, [f["study"], out_dir.name]))
    runs = [r["wandb"]["run_id"] for r in records if (r.get("wandb") or {}).get("run_id")]
    try:
        run = wandb.init(project=info.get("project") or logger.get("project") or "transformerop",
                         entity=logger.get("entity"), group=group, job_type="report", name=f"{group} report",
                         dir=str(out_dir), mode=mode, config={**f, "runs": runs}, reinit="create_new",
                         settings=wandb.Settings(console="off", x_disable_stats=True))
        table = wandb.Table(dataframe=df.astype(object).where(df.notna(), None).astype(str))
        run.log({"report": table, "report_chart": wandb.Image(str(files["png"]))})
        art = wandb.Artifact(f"report-{run.id}", type="report")
        for p in files.values():
            art.add_file(str(p))
        run.log_artifact(art)
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
    f = facts(records, meta, paths)
    if publish and not f["clean"] and not allow_dirty:
        raise ReportError(f"--publish: these records are not from a clean commit ({f['code']}); rerun from "
                          "a clean commit, or pass --allow-dirty to publish them labelled as such")
    out = paths[0] if paths[0].is_dir() else paths[0].parent
    files = {"md": out / "report.md", "csv": out / "report.csv", "png": out / "report.png"}
    draw_chart(df, meta, records, files["png"], f"{f['study'] or out.name} on {f['device']}" + " (smoke)" * f["smoke"])
    df.to_csv(files["csv"], index=False)
    extra = section(next((study_of(r)["goals"] for r in records if study_of(r).get("goals")), []), df, records)
    extra += search_section(out, df, records)
    files["md"].write_text(markdown(df, meta, f, files["png"].name, extra))
    if publish and f["study"]:
        pub = Path(publish)
        pub.mkdir(parents=True, exist_ok=True)
        (pub / f"{f['study']}.png").write_bytes(files["png"].read_bytes())
        (pub / f"{f['study']}.csv").write_text(files["csv"].read_text())
        (pub / f"{f['study']}.md").write_text(markdown(df, meta, f, f"{f['study']}.png", extra))
    wb = log_wandb(df, files, records, out, f) if use_wandb else "W&B: off (--no-wandb)"
    return {"df": df, "meta": meta, "facts": f, **files, "wandb": wb, "table": display(df, meta)}


def main(argv=None) -> int:
    from ..logs import setup_cli
    from .scorecard import scorecard, update_readme
    setup_cli()
    p = argparse.ArgumentParser(prog="python -m transformerop.report", description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="*", help="sweep dirs (outputs/multirun/<stamp>), searched recursively")
    p.add_argument("--no-wandb", action="store_true", help="do not log the report to W&B")
    p.add_argument("--publish", metavar="DIR", help="also write DIR/<study>.md, .csv and .png (experiments/results)")
    p.add_argument("--allow-dirty", action="store_true", help="with --publish: accept records of uncommitted code")
    p.add_argument("--scorecard", metavar="DIR", help="print the README scorecard built from DIR/*.csv")
    p.add_argument("--readme", metavar="FILE", help="with --scorecard: rewrite FILE's scorecard block instead")
    a = p.parse_args(argv)
    try:
        if a.scorecard:
            block = scorecard(a.scorecard)
            if a.readme and update_readme(a.readme, block):
                log.info(f"updated the scorecard block in {a.readme}")
            else:
                log.info(f"{a.readme}: no {SCORE_START} / {SCORE_END} markers; the block:\n" * bool(a.readme) + block)
            return 0
        if not a.paths:
            raise ReportError("give a sweep dir: python -m transformerop.report outputs/multirun/<stamp>")
        out = report(a.paths, use_wandb=not a.no_wandb, publish=a.publish, allow_dirty=a.allow_dirty)
    except ReportError as e:
        log.error(f"error: {e}")
        return 2
    log.info(to_markdown(out["table"]))
    log.info(f"\nwrote {out['md']}, {out['csv']}, {out['png']}\n{out['wandb']}")
    return 0

