"""Every job's record: a W&B run (offline by default, files inside the job dir) and a
`results.json` written whatever happens. The report reads only results.json files."""
import json
import os
import time
import uuid
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

RESULTS = "results.json"
_current = None
# A W&B service inherited from a parent process (one that used wandb, then launched us) keeps the
# stream of a job killed by SIGKILL open forever, so the job's resume would be refused ("run ID
# in use"): every process starts its own service instead.
os.environ.pop("WANDB_SERVICE", None)


def current() -> "Tracker":
    """The tracker of the job in progress (tasks log through it)."""
    if _current is None:
        raise RuntimeError("no job is running: tasks must be run through transformerop.jobs.run_job")
    return _current


def write_json_atomic(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    tmp.replace(path)  # readers never see half a file


def read_results(job_dir) -> dict | None:
    path = Path(job_dir) / RESULTS
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class Tracker:
    def __init__(self, cfg, job_dir: Path, task: str, overrides: list, group: str, tags: list):
        self.cfg, self.job_dir, self.task = cfg, Path(job_dir), task
        self.overrides, self.group, self.tags = overrides, group, tags
        self.metrics, self.timings, self.tables, self.history = {}, {}, {}, []
        self.run = None
        self.started = time.time()
        self.main = int(os.environ.get("RANK", "0")) == 0  # under torchrun only rank 0 records

    # -- W&B -----------------------------------------------------------------
    def start(self) -> None:
        global _current
        _current = self
        lc = self.cfg.logger
        if lc.name != "wandb" or lc.mode == "disabled" or not self.main:
            return
        import wandb

        id_file = self.job_dir / "wandb_id.txt"  # a rerun into the same dir continues the same run
        run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:8]
        id_file.write_text(run_id)
        os.environ.setdefault("WANDB_SILENT", "true")
        self.run = wandb.init(
            project=lc.project, entity=lc.entity, group=self.group, job_type=self.task, tags=self.tags,
            name=f"{self.group}/{self.job_dir.name}", id=run_id, resume="allow", dir=str(self.job_dir),
            mode=lc.mode, config=OmegaConf.to_container(self.cfg, resolve=True), reinit="create_new",
            settings=wandb.Settings(console="off", x_disable_stats=True),
        )
        for key, how in (("val_loss", "min"), ("train_loss", "min"), ("exact_match", "max"),
                         ("bits_per_char", "min"), ("tok_per_s", "max")):
            self.run.define_metric(key, summary=how)

    def log(self, metrics: dict, step: int | None = None) -> None:
        self.history.append({"step": step, **metrics})
        if self.run is not None:
            self.run.log(metrics, step=step)

    def set(self, **metrics) -> None:
        """Final scalar metrics (W&B summary and results.json `metrics`)."""
        self.metrics.update(metrics)
        if self.run is not None:
            self.run.summary.update(metrics)

    def timing(self, name: str, stats: dict) -> None:
        """One timed region: median, spread, repeats, warm-up, predicted, measured/predicted."""
        self.timings[name] = stats
        if self.run is not None:
            self.run.summary.update({f"timing/{name}/{k}": v for k, v in stats.items()
                                     if isinstance(v, (int, float))})

    def table(self, name: str, columns: list, rows: list) -> None:
        self.tables[name] = {"columns": columns, "rows": rows}
        if self.run is not None:
            import wandb
            self.run.log({name: wandb.Table(columns=columns, data=[list(r) for r in rows])})

    def file(self, path) -> None:
        if self.run is not None:
            self.run.save(str(path), base_path=str(self.job_dir), policy="now")

    def wandb_info(self) -> dict:
        if self.run is None:
            return {"mode": "off"}
        return {"mode": self.cfg.logger.mode, "run_id": self.run.id, "project": self.cfg.logger.project,
                "group": self.group, "dir": str(Path(self.run.dir).parent)}

    # -- results.json --------------------------------------------------------
    def record(self, status: str, error: dict | None, env: dict) -> dict:
        return {
            "status": status, "error": error, "task": self.task, "overrides": self.overrides,
            "study": OmegaConf.to_container(self.cfg.study, resolve=True), "tags": self.tags,
            "config": OmegaConf.to_container(self.cfg, resolve=True), "metrics": self.metrics,
            "timings": self.timings, "tables": self.tables, "history": self.history, "env": env,
            "wandb": self.wandb_info(), "job_dir": str(self.job_dir),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.started)),
            "wall_s": round(time.time() - self.started, 3),
        }

    def finish(self, status: str, error: dict | None, env: dict) -> dict:
        global _current
        record = self.record(status, error, env)
        if self.main:
            write_json_atomic(self.job_dir / RESULTS, record)
        if self.run is not None:
            self.run.summary.update({"status": status, **({"error": error["message"]} if error else {})})
            self.run.finish(exit_code=0 if status != "failed" else 1)
            self.run = None
        _current = None
        return record


class SweepSummary(Callback):
    """Hydra callback: after a multirun, list ok / failed / skipped jobs with their overrides."""

    failed = False  # read by run.py to set the process exit code

    def on_multirun_end(self, config, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        rows = []
        for path in sorted(sweep_dir.glob(f"*/{RESULTS}"), key=lambda p: (len(p.parent.name), p.parent.name)):
            r = read_results(path.parent) or {"status": "failed", "error": {"message": "unreadable results.json"}}
            reason = (r.get("error") or {}).get("message", "")
            rows.append((path.parent.name, r.get("status"), " ".join(r.get("overrides", [])), reason))
        counts = {s: sum(1 for r in rows if r[1] == s) for s in ("ok", "failed", "skipped")}
        print(f"\nSweep {sweep_dir}: {counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped")
        for job, status, overrides, reason in rows:
            print(f"  [{status:7}] {job:>3}  {overrides}" + (f"  -- {reason.splitlines()[0][:160]}" if reason else ""))
        SweepSummary.failed = counts["failed"] > 0
