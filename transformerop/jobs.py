"""One Hydra job: validate, pick the task, run it, and record the outcome whatever it is.

Config errors fail before any work (a single run leaves no output dir behind); a backend that
cannot run here marks the job `skipped`; any other exception marks it `failed`. In a multirun
the sweep goes on and run.py exits non-zero at the end if any job failed."""
import gc
import importlib
import shutil
import sys
import traceback
from pathlib import Path

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from . import distributed, tracking
from .config import mark_job_start
from .runtime import env_info, peak_memory_bytes, pick_device

TASKS = ("train", "generate", "bench", "profile", "validate", "calibrate", "predict", "report")


class ConfigError(ValueError):
    """A config that cannot work: reported in one line before anything runs."""


def task_module(name: str):
    if name not in TASKS:
        raise ConfigError(f"task.name={name!r}: choose one of {list(TASKS)}")
    return importlib.import_module(f"transformerop.tasks.{name}")


def validate(cfg) -> None:
    """Every check that needs no data and no device work. Raises ConfigError or BackendUnavailable."""
    from .model import validate_model_config, get_backend
    from .runtime import torch_dtype
    try:  # a ValueError anywhere here is a config that cannot work
        mod = task_module(cfg.task.name)
        validate_model_config(cfg)
        torch_dtype(cfg.train.dtype)
        device = pick_device(cfg.device)
        get_backend(cfg.attention.name).check(cfg, device)  # may raise BackendUnavailable (-> skipped)
        if hasattr(mod, "check"):
            mod.check(cfg, device)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _attention_backward(cfg) -> str:
    """What computes the attention gradient: autograd, our kernel, or a reference recompute."""
    from .model import get_backend
    try:
        return get_backend(cfg.attention.name).backward
    except (ValueError, ImportError):
        return "unknown"


def _tags(cfg, choices) -> list:
    tags = [f"attention={cfg.attention.name}", f"decode={cfg.decode.name}", f"dtype={cfg.train.dtype}",
            f"task={cfg.task.name}", f"model={choices.get('model', cfg.model.name)}",
            f"attention_backward={_attention_backward(cfg)}"]
    exp = choices.get("experiment") or cfg.study.name
    if exp:
        tags.append(f"experiment={exp}")
    return tags + list(cfg.tags)


def _error(exc: BaseException) -> dict:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {"type": type(exc).__name__, "message": str(exc) or type(exc).__name__, "traceback": tb[-4000:]}


def run_job(cfg) -> dict | None:
    from .model import BackendUnavailable

    mark_job_start()
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    job_dir = Path(hc.runtime.output_dir)
    overrides = list(hc.overrides.task)
    choices = dict(hc.runtime.choices)

    previous = tracking.read_results(job_dir)
    if multirun and previous and previous.get("status") == "ok" and not cfg.rerun:
        print(f"[{job_dir.name}] already ok in {job_dir} (rerun=true to run again): skipped")
        return previous

    group = Path(hc.sweep.dir).name if multirun else "runs"
    if cfg.study.name and multirun:
        group = f"{cfg.study.name}/{group}"
    tracker = tracking.Tracker(cfg, job_dir, cfg.task.name, overrides, group, _tags(cfg, choices))
    device = None
    try:
        validate(cfg)
    except ConfigError as e:
        if not multirun:
            _remove_fresh_dir(job_dir)
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(2)
        return tracker.finish("failed", _error(e), env_info(torch.device("cpu")))
    except BackendUnavailable as e:
        print(f"[{job_dir.name}] skipped: {e}", file=sys.stderr)
        tracker.start()
        record = tracker.finish("skipped", _error(e), env_info(torch.device("cpu")))
        if not multirun:
            raise SystemExit(3)
        return record

    status, error = "ok", None
    try:
        device = distributed.init(pick_device(cfg.device))
        tracker.start()
        tracker.set(attention_backward=_attention_backward(cfg))
        metrics = task_module(cfg.task.name).run(cfg) or {}
        tracker.set(**metrics)
    except BackendUnavailable as e:
        status, error = "skipped", _error(e)
    except Exception as e:  # recorded, and the sweep goes on
        status, error = "failed", _error(e)
        if isinstance(e, torch.OutOfMemoryError):
            gc.collect()
            torch.cuda.empty_cache()
    if "peak_memory_bytes" not in tracker.metrics:  # failed jobs report it too (OOM hunting)
        tracker.set(peak_memory_bytes=peak_memory_bytes(device or torch.device("cpu")))
    record = tracker.finish(status, error, env_info(device or torch.device("cpu")))
    distributed.shutdown()
    if error:
        print(f"[{job_dir.name}] {status}: {error['type']}: {error['message']}", file=sys.stderr)
        if not multirun:
            if status == "failed":
                print(error["traceback"], file=sys.stderr)
            raise SystemExit(1 if status == "failed" else 3)
    return record


def _remove_fresh_dir(job_dir: Path) -> None:
    """A config error leaves no run dir: remove it if it holds only Hydra's own files."""
    if job_dir.exists() and all(p.name in (".hydra", "run.log", f"{Path(sys.argv[0]).stem}.log")
                                for p in job_dir.iterdir()):
        shutil.rmtree(job_dir, ignore_errors=True)

