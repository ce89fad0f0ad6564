"""task=report: the comparison report (transformerop.report) as a Hydra job.

Which sweep: `report.path` (one dir, or several joined by os.pathsep), else the environment
variable TRANSFORMEROP_REPORT_PATH, else the newest dir under outputs/multirun (relative to where
run.py is launched, as Hydra writes it):

    python run.py task=report                                            # the latest sweep
    python run.py task=report report.path=outputs/multirun/<stamp>

report.md / report.csv / report.png land in the sweep dir as with `python -m transformerop.report`;
the table goes to this job's W&B run and results.json tables, report.md and report.png are copied
into the job dir and saved to that run, so no second W&B run is made."""
import logging
import os
import shutil
from pathlib import Path

from .. import tracking
from ..report import ReportError, report

log = logging.getLogger(__name__)

ENV = "TRANSFORMEROP_REPORT_PATH"
SWEEPS = Path("outputs") / "multirun"


def sweep_paths(cfg=None) -> list:
    given = (cfg.report.path if cfg is not None else None) or os.environ.get(ENV)
    if given:
        return [Path(p) for p in given.split(os.pathsep) if p]
    dirs = [d for d in SWEEPS.glob("*") if d.is_dir()] if SWEEPS.is_dir() else []
    if not dirs:
        raise ValueError(f"task=report: set {ENV}=<sweep dir>, or run a sweep first (no dirs under {SWEEPS})")
    return [max(dirs, key=lambda d: d.stat().st_mtime)]


def check(cfg, device) -> None:
    missing = [str(p) for p in sweep_paths(cfg) if not p.exists()]
    if missing:
        raise ValueError(f"report.path: no such directory {', '.join(missing)}")


def run(cfg) -> dict:
    tracker = tracking.current()
    paths = sweep_paths(cfg)
    try:
        out = report(paths, use_wandb=False)
    except ReportError as e:
        raise ValueError(str(e)) from None  # recorded as failed with the one-line reason
    table = out["table"]
    tracker.table("report", list(table.columns), table.values.tolist())
    copies = [shutil.copy(f, tracker.job_dir / f.name) for f in (out["md"], out["csv"], out["png"])]
    tracker.artifact("report", copies)  # W&B stages files from inside the job dir only
    log.info(f"report of {' '.join(map(str, paths))}: {out['md']}, {out['csv']}, {out['png']}")
    return {"report_jobs": len(out["df"]), **{f"report_{k}": v for k, v in out["facts"]["counts"].items()},
            "report_md": str(out["md"])}
