"""One Hydra job: check, pick the task, run it, and record the outcome whatever it is.

A single run checks its config before Hydra makes the run dir (the Preflight callback): bad
input exits with one line (exit 2) and leaves nothing behind; a backend that cannot run here
says so in one line (exit 3). In a multirun each job is checked on its own and recorded:
`failed` (with a W&B run finished as failed) or `skipped`, and the sweep goes on; run.py exits
non-zero at the end if any job failed. With sweep.isolate=true every job runs in a fresh process
of its own (sweep.py), so what it measures from launch is what a user would see."""
import functools
import gc
import logging
import os
import sys
import traceback
from pathlib import Path

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode

from . import clock, config_check, cuda_early, distributed, tracking
from .errors import BackendUnavailable, ConfigError, UserError, show_traceback
from .runtime import env_info, peak_memory_bytes, pick_device, reset_peak_memory
from .tasks import task_module

log = logging.getLogger(__name__)
GROUP_ENV = "TRANSFORMEROP_GROUP"  # set by an isolating sweep for its child processes


def compose_once(argv=None) -> None:
    """@hydra.main composes the whole config twice per launch: once only to read `hydra.mode`,
    then again to run it (~0.1 s each, a share of a 3 s start-up). No config here sets
    hydra.mode, so unless the command line does, the first compose is skipped and Hydra picks run
    or multirun from `-m` exactly as it does when hydra.mode is unset. (A `hydra.mode` in a config
    file is therefore not read: give it on the command line.) Hydra's private API: if it moved,
    nothing is skipped."""
    argv = sys.argv[1:] if argv is None else argv
    if any(a.lstrip("+~").startswith("hydra.mode=") for a in argv):
        return
    try:
        from hydra._internal.hydra import Hydra
    except ImportError:
        return
    if hasattr(Hydra, "get_mode"):
        Hydra.get_mode = lambda self, *args, **kwargs: None


def validate(cfg, with_data: bool = True) -> None:
    """Every check that needs no training and no timing: schema ranges and keys, shapes, dtype,
    device, backend, the task's own checks, the data file. Raises ConfigError (or another
    UserError) or BackendUnavailable."""
    from .data import check_data
    from .model import MODELS, get_backend, validate_model_config
    from .runtime import torch_dtype
    config_check.check(cfg)
    try:  # a ValueError anywhere here is a config that cannot work
        mod = task_module(cfg.task.name)
        validate_model_config(cfg)
        torch_dtype(cfg.train.dtype)
        device = pick_device(cfg.device)
        get_backend(cfg.attention.name).check(cfg, device)  # may raise BackendUnavailable (-> skipped)
        model_cls = MODELS.get(cfg.model.name)
        if hasattr(model_cls, "check"):
            model_cls.check(cfg, device)
        if hasattr(mod, "check"):
            mod.check(cfg, device)
    except UserError:
        raise
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if with_data and getattr(mod, "needs_data", lambda c: True)(cfg):
        check_data(cfg)


def one_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class Preflight(Callback):
    """Hydra callback: a single run's config is checked before Hydra makes its run dir."""

    def on_run_start(self, config, **kwargs) -> None:
        from .sweep import CHILD_ENV
        if os.environ.get(CHILD_ENV):  # a sweep's job in its own process: checked and recorded in run_job
            return
        try:
            validate(config)
        except UserError as e:
            sys.stderr.write(f"error: {one_line(e)}\n")
            raise SystemExit(2) from None
        except BackendUnavailable as e:
            sys.stderr.write(f"skipped: {one_line(e)}\n")
            raise SystemExit(3) from None


def labels(cfg, device) -> dict:
    """What every compared row must say about itself: how the attention's matmuls round
    (ieee / tf32 / bf16) and what computes its gradient (autograd / kernel / reference)."""
    from .model import get_backend
    try:
        b = get_backend(cfg.attention.name)
        return {"precision": b.precision(cfg.train.dtype, cfg.attention, device), "attention_backward": b.backward}
    except (ValueError, ImportError):
        return {"precision": "unknown", "attention_backward": "unknown"}


def _launch_fallbacks() -> dict:
    """A Triton kernel that had to fall back from its direct launch to the JIT, or that the C++
    launcher refused (it then launched from Python), says so here, and so do the Gluon forwards."""
    launch, op = sys.modules.get("kernels.triton_launch"), sys.modules.get("kernels.triton_attention_op")
    err, refused = getattr(launch, "fallback_error", None), getattr(op, "refused", None)
    out = {"triton_launch_fallback": err} if err else {}
    # attention.forward=gluon: how many forwards each kernel ran (the tl one takes what gluon cannot)
    ta = sys.modules.get("kernels.triton_attention")
    if ta is not None and ta.stats["gluon"]:
        out["attention_forwards"] = dict(ta.stats)
    return {**out, "triton_cpp_refused": dict(refused)} if refused else out


def _tags(cfg, choices) -> list:
    tags = [f"attention={cfg.attention.name}", f"decode={cfg.decode.name}", f"dtype={cfg.train.dtype}",
            f"task={cfg.task.name}", f"model={choices.get('model', cfg.model.name)}",
            f"attention_backward={labels(cfg, 'cpu')['attention_backward']}"]
    exp = choices.get("experiment") or cfg.study.name
    if exp:
        tags.append(f"experiment={exp}")
    return tags + list(cfg.tags)


def _error(exc: BaseException) -> dict:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {"type": type(exc).__name__, "message": str(exc) or type(exc).__name__, "traceback": tb[-4000:]}


def _group(cfg, hc, multirun: bool) -> str:
    if os.environ.get(GROUP_ENV):
        return os.environ[GROUP_ENV]
    group = Path(hc.sweep.dir).name if multirun else "runs"
    return f"{cfg.study.name}/{group}" if cfg.study.name and multirun else group


def run_job(cfg) -> dict | None:
    clock.job_started()
    clock.mark_launch()  # fresh jobs: launch -> imports done -> here (Hydra's compose, run dir, checks)
    from .sweep import CHILD_ENV
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    in_sweep = multirun or bool(os.environ.get(CHILD_ENV))  # failures are recorded, never exit
    job_dir = Path(hc.runtime.output_dir)
    overrides = list(hc.overrides.task)
    choices = dict(hc.runtime.choices)

    previous = tracking.read_results(job_dir)
    if multirun and previous and previous.get("status") == "ok" and not cfg.rerun:
        log.info(f"[{job_dir.name}] already ok in {job_dir} (rerun=true to run again): skipped")
        return previous
    if multirun and cfg.sweep.isolate:
        from .sweep import run_isolated
        return run_isolated(cfg, job_dir, overrides, _group(cfg, hc, multirun), hc.job.num)

    from .naming import run_name
    tracker = tracking.Tracker(cfg, job_dir, cfg.task.name, overrides, _group(cfg, hc, multirun),
                               _tags(cfg, choices), run_name(overrides, hc, job_dir))
    try:
        validate(cfg)
    except (UserError, BackendUnavailable) as e:  # a single run checked this before its run dir
        status = "skipped" if isinstance(e, BackendUnavailable) else "failed"
        log.warning(f"[{job_dir.name}] {status}: {one_line(e)}")
        tracker.start()  # the sweep's W&B group shows this job too, finished as failed or skipped
        return tracker.finish(status, _error(e), env_info(torch.device("cpu")))
    clock.mark("checks")

    status, error, device, known = "ok", None, None, False
    from .model import kernel_warmups
    cuda_early.warm_kernels(functools.partial(kernel_warmups, cfg))  # compiles beside the warm-up's end
    cuda_early.settle()  # no other thread may touch the GPU while the job captures a CUDA graph
    clock.mark("warm")  # what the job waited for the warm-up (run.py) beyond Hydra's compose
    try:
        device = distributed.init(pick_device(cfg.device))
        reset_peak_memory(device)  # jobs of a sweep share a process: this job's peak, not the sweep's
        tracker.start()  # W&B itself starts after start-up, in the background
        tracker.set(**labels(cfg, device))
        metrics = task_module(cfg.task.name).run(cfg) or {}
        tracker.set(**metrics, **_launch_fallbacks())
    except BackendUnavailable as e:
        status, error = "skipped", _error(e)
    except Exception as e:  # recorded, and the sweep goes on
        status, error, known = "failed", _error(e), isinstance(e, UserError)
        if isinstance(e, torch.OutOfMemoryError):
            gc.collect()
            torch.cuda.empty_cache()
    if "peak_memory_bytes" not in tracker.metrics:  # failed jobs report it too (OOM hunting)
        tracker.set(peak_memory_bytes=peak_memory_bytes(device or torch.device("cpu")))
    record = tracker.finish(status, error, env_info(device or torch.device("cpu")))
    distributed.shutdown()
    if error:
        first = error["message"].splitlines()[0]
        log.error(f"error: {first}" if known and not in_sweep
                  else f"[{job_dir.name}] {status}: {error['type']}: {first}")
        if status == "failed" and (not known or show_traceback()):
            log.error(error["traceback"])
        if not in_sweep:
            raise SystemExit(1 if status == "failed" else 3)
    return record


def objective(record: dict | None, cfg):
    """What a hyper-parameter search optimizes (search.objectives), read from the job's record:
    None (a failed trial) when the job did not finish ok or did not measure them."""
    names = list(cfg.search.objectives)
    if not names or not record or record.get("status") != "ok":
        return None
    values = [(record.get("metrics") or {}).get(n, record.get(n)) for n in names]
    if any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in values):
        return None
    return float(values[0]) if len(values) == 1 else tuple(float(v) for v in values)
