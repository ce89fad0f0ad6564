"""Every job's record, written to two sinks from one place: a W&B run (offline by default, files
inside the job dir) and `results.json`, written whatever happens. The report reads only
results.json; tests read the W&B run's record log back (wandb_log.py) and require the two to
agree on config, summary and exit code.

Names: `metrics` are final scalars (W&B summary = results.json metrics, key for key). History
rows (the curves) use their own names (`eval/val_loss`, `train/window_step_ms`, ...) so that no
logged row can overwrite a final metric in the W&B summary."""
import json
import logging
import os
import threading
import time
import uuid
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

from . import clock

log = logging.getLogger(__name__)
RESULTS = "results.json"
CONSOLE = "run.log"  # Hydra's job log (conf/hydra/job_logging/project.yaml: run.py's job name)
ATTEMPTS = "attempts"  # earlier records of a job dir, kept when a newer attempt replaces or fails after them
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


def _scalar(v) -> bool:
    return isinstance(v, (int, float, str, bool)) or v is None


# What the report shows of each timed region, as `<region>_<stat>` columns of the job's row.
TIMING_STATS = ("median_ms", "p25_ms", "p75_ms", "min_ms", "max_ms", "repeats", "predicted_ms",
                "measured_over_predicted", "flagged", "bound", "mfu", "kernel_us", "kernels", "gpu_busy",
                "host_us", "flops", "bytes", "intensity", "achieved_flops", "peak_flops", "bandwidth")


def flat_row(metrics: dict, timings: dict) -> dict:
    """The job as one flat row: every scalar metric, then each timed region's statistics as
    `<region>_<stat>`. results.json carries it as `row`; the report is a table of these rows."""
    row = {k: v for k, v in metrics.items() if _scalar(v)}
    for region, t in timings.items():
        row.update({f"{region}_{k}": t[k] for k in TIMING_STATS if k in t and _scalar(t[k])})
    return row


class Tracker:
    def __init__(self, cfg, job_dir: Path, task: str, overrides: list, group: str, tags: list, name: str = ""):
        self.cfg, self.job_dir, self.task = cfg, Path(job_dir), task
        self.overrides, self.group, self.tags, self.name = overrides, group, tags, name or Path(job_dir).name
        self.metrics, self.timings, self.tables, self.history = {}, {}, {}, []
        self.run = None
        self._starter, self._pending, self._start_error = None, None, None
        self._lock = threading.Lock()
        self.started = time.time()
        self.main = int(os.environ.get("RANK", "0")) == 0  # under torchrun only rank 0 records

    # -- W&B -----------------------------------------------------------------
    def start(self) -> None:
        """Starts the W&B run in a background thread once the job's start-up is over (its first
        train step) or, with logger.start=train_end, once a train job's loop and the timed work
        after it are over (either way at the job's end at the latest): importing wandb and
        starting its service took ~2 s of mostly Python on the H200 machine, which holds the GIL
        against whatever runs beside it. Until the run exists, what is logged waits in order and
        is replayed into it as it starts."""
        global _current
        _current = self
        lc = self.cfg.logger
        if lc.name != "wandb" or lc.mode == "disabled" or not self.main:
            return
        id_file = self.job_dir / "wandb_id.txt"  # a rerun into the same dir continues the same run
        run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:8]
        id_file.write_text(run_id)
        config = OmegaConf.to_container(self.cfg, resolve=True, enum_to_str=True)
        self._pending, self._start_error = [], None
        self._starter = threading.Thread(target=self._start_wandb, args=(lc, run_id, config),
                                         name="wandb-start", daemon=True)
        self._starter.start()

    def _start_wandb(self, lc, run_id: str, config: dict) -> None:
        (clock.train_over if lc.start == "train_end" else clock.startup_over).wait()
        try:
            import wandb
            os.environ.setdefault("WANDB_SILENT", "true")
            run = wandb.init(
                project=lc.project, entity=lc.entity, group=self.group, job_type=self.task, tags=self.tags,
                name=self.name, id=run_id, resume="allow", dir=str(self.job_dir), mode=lc.mode, config=config,
                reinit="create_new", settings=wandb.Settings(console=lc.console, x_disable_stats=not lc.system_metrics),
            )
            # the curves' own summaries, under their own names (never a final metric's key)
            for key, how in (("eval/val_loss", "min"), ("eval/train_loss", "min"), ("eval/exact_match", "max")):
                run.define_metric(key, summary=how)
        except Exception as e:  # noqa: BLE001 -- reported by finish() in the job's own thread
            self._start_error = f"W&B run did not start: {type(e).__name__}: {e}"
            with self._lock:
                self._pending = None
            return
        while True:  # replay in order, outside the lock: the job's own calls never wait on a replay
            with self._lock:
                todo, self._pending = self._pending, []
                if not todo:
                    self._pending, self.run = None, run
                    return
            for fn in todo:
                self._apply(fn, run)

    @staticmethod
    def _apply(fn, run) -> None:
        try:
            fn(run)
        except Exception as e:  # noqa: BLE001 -- one failed W&B call loses that value, not the run
            log.warning(f"W&B: a queued call failed ({type(e).__name__}: {e}); results.json keeps the value")

    def _to_wandb(self, fn) -> None:
        """fn(run) now if the run exists, else once it starts (in the order of the calls)."""
        with self._lock:
            run = self.run
            if run is None and self._pending is not None:
                self._pending.append(fn)
        if run is not None:
            fn(run)

    def wait_for_wandb(self) -> None:
        """Blocks until the W&B run has started (or failed to: finish() records why)."""
        if self._starter is not None:
            clock.startup_over.set()  # nothing to wait for any more: the job wants its run now
            clock.train_over.set()
            self._starter.join()
            self._starter = None

    def log(self, row: dict, step: int | None = None) -> None:
        """One history row (a point on the curves)."""
        self.history.append({"step": step, **row})
        self._to_wandb(lambda run: run.log(row, step=step))

    def resume_history(self, rows: list) -> None:
        """The curve so far, from a checkpoint. Rows are logged again to this (resumed) W&B run:
        the killed process's last rows may never have reached its files, and on upload the
        server keeps only steps it does not have yet."""
        self.history = list(rows)
        for row in rows:
            if row.get("step") is not None:
                values = {k: v for k, v in row.items() if k != "step"}
                self._to_wandb(lambda run, values=values, step=row["step"]: run.log(values, step=step))

    def set(self, **metrics) -> None:
        """Final scalar metrics: results.json `metrics` and the W&B summary, the same keys."""
        self.metrics.update(metrics)
        self._to_wandb(lambda run: run.summary.update(metrics))

    def timing(self, name: str, stats: dict) -> None:
        """One timed region: median, spread, repeats, warm-up, predicted, measured/predicted.
        results.json keeps the whole row; W&B gets them as one `timings` table at the end."""
        self.timings[name] = stats

    def table(self, name: str, columns: list, rows: list) -> None:
        self.tables[name] = {"columns": columns, "rows": rows}

        def log_table(run):
            import wandb
            run.log({name: wandb.Table(columns=columns, data=[list(r) for r in rows])})
        self._to_wandb(log_table)

    def file(self, path) -> None:
        self._to_wandb(lambda run: run.save(str(path), base_path=str(self.job_dir), policy="now"))

    def artifact(self, kind: str, paths, metadata: dict | None = None) -> None:
        """Files as one W&B artifact of type `kind` (offline: staged in the run files, uploaded by
        `wandb sync`), named after the kind and the run so every job's stays its own."""
        paths = [str(p) for p in paths]

        def log_artifact(run):
            import wandb
            art = wandb.Artifact(f"{kind}-{run.id}", type=kind, metadata=metadata or {})
            for p in paths:
                art.add_file(p)
            run.log_artifact(art)
        self._to_wandb(log_artifact)

    def wandb_info(self) -> dict:
        self.wait_for_wandb()
        if self.run is None:
            return {"mode": "off", "error": self._start_error} if self._start_error else {"mode": "off"}
        folders = sorted(str(p) for p in (self.job_dir / "wandb").glob(f"*-run-*-{self.run.id}"))
        return {"mode": self.cfg.logger.mode, "run_id": self.run.id, "project": self.cfg.logger.project,
                "group": self.group, "name": self.name, "dir": str(Path(self.run.dir).parent), "folders": folders}

    # -- results.json --------------------------------------------------------
    def record(self, status: str, error: dict | None, env: dict) -> dict:
        return {
            "status": status, "error": error, "task": self.task, "overrides": self.overrides,
            "study": OmegaConf.to_container(self.cfg.study, resolve=True, enum_to_str=True), "tags": self.tags,
            "config": OmegaConf.to_container(self.cfg, resolve=True, enum_to_str=True), "metrics": self.metrics,
            "timings": self.timings, "row": flat_row(self.metrics, self.timings), "tables": self.tables,
            "history": self.history, "env": env,
            "wandb": self.wandb_info(), "job_dir": str(self.job_dir),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.started)),
            "wall_s": round(time.time() - self.started, 3),
        }

    def _write(self, record: dict) -> Path:
        """results.json, unless that would replace an ok record with a failed one: then the failed
        attempt is kept under attempts/ and the ok record stays. A replaced record is kept there too."""
        path = self.job_dir / RESULTS
        old = read_results(self.job_dir)
        stamp = record["started"].replace(":", "-")
        attempts = self.job_dir / ATTEMPTS
        if old is not None and old.get("status") == "ok" and record["status"] != "ok":
            attempts.mkdir(exist_ok=True)
            kept = attempts / f"results-{stamp}-{record['status']}.json"
            write_json_atomic(kept, record)
            log.info(f"this attempt {record['status']}; the earlier ok {path} is kept, this record is {kept}")
            return kept
        if old is not None:
            attempts.mkdir(exist_ok=True)
            write_json_atomic(attempts / f"results-{str(old.get('started', 'unknown')).replace(':', '-')}-"
                                         f"{old.get('status')}.json", old)
        write_json_atomic(path, record)
        return path

    def finish(self, status: str, error: dict | None, env: dict) -> dict:
        global _current
        self.wait_for_wandb()
        if self._start_error:  # a job that asked for a W&B run and got none did not do what was asked
            log.error(self._start_error)
            error = error or {"type": "WandbError", "message": self._start_error, "traceback": ""}
            status = "failed" if status == "ok" else status
        record = self.record(status, error, env)
        written = self._write(record) if self.main else None
        if self.run is not None:
            import wandb
            if written is not None:
                self.artifact("results", [written])
            # the job's whole console, with times: W&B's own capture (output.log) starts with its
            # run, after start-up, and misses what came before
            if (self.job_dir / CONSOLE).exists():
                self.file(self.job_dir / CONSOLE)
            best = self.job_dir / "best.pt"
            if best.exists() and status == "ok":
                self.artifact("model", [best], {k: self.metrics.get(k) for k in ("best_val_loss", "best_step")})
            if self.timings:
                cols = sorted({k for row in self.timings.values() for k, v in row.items() if _scalar(v)})
                self.run.log({"timings": wandb.Table(columns=["region", *cols],
                                                     data=[[n, *(row.get(c) for c in cols)]
                                                           for n, row in self.timings.items()])})
            # the whole metrics dict last, after every history row: the summary equals results.json
            self.run.summary.update({**self.metrics, "status": status,
                                     **({"error": error["message"]} if error else {})})
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
        lines = [f"Sweep {sweep_dir}: {counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped"]
        for job, status, overrides, reason in rows:
            lines.append(f"  [{status:7}] {job:>3}  {overrides}"
                         + (f"  -- {reason.splitlines()[0][:160]}" if reason else ""))
        log.info("\n" + "\n".join(lines))
        SweepSummary.failed = counts["failed"] > 0
