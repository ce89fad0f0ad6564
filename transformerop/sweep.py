"""sweep.isolate=true: a multirun job runs as a fresh process of its own -- exactly
`python run.py <the job's overrides> hydra.run.dir=<the job's dir>` -- so its clock starts at a
real process launch (imports, CUDA init, W&B start all paid), it shares no warm state with
earlier jobs, and on a machine with GPUs it holds one GPU for itself (CUDA_VISIBLE_DEVICES) for
as long as it runs. With a parallel launcher (hydra/launcher=joblib, n_jobs = GPUs) the jobs of
a sweep spread over the GPUs of the host, never two on one GPU.

The GPU pool is a set of lock files (one per GPU, flock'd by the job holding it) in the system
temp dir, so two sweeps on the same host share the pool too. The child writes the job's
results.json and W&B run; this process only relays its output and reads the record back."""
import fcntl
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import REPO_ROOT, tracking

log = logging.getLogger(__name__)
CHILD_ENV = "TRANSFORMEROP_ISOLATED"
POOL_DIR = Path(tempfile.gettempdir()) / "transformerop-gpu-pool"


def visible_gpus() -> list:
    """Physical ids of the GPUs this process may hand out (CUDA_VISIBLE_DEVICES, else all)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    try:
        import torch
        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 -- no CUDA runtime: no GPUs to pool
        return []


class GPULease:
    """Holds one GPU of the pool until closed (blocks while every GPU is taken)."""

    def __init__(self, gpus: list, poll_s: float = 0.5):
        POOL_DIR.mkdir(exist_ok=True)
        self.gpu, self.fd = None, None
        while self.gpu is None:
            for g in gpus:
                fd = os.open(POOL_DIR / f"gpu{g}.lock", os.O_CREAT | os.O_RDWR)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                self.gpu, self.fd = g, fd
                break
            else:
                time.sleep(poll_s)

    def close(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def child_command(overrides: list, job_dir: Path) -> list:
    return [sys.executable, str(REPO_ROOT / "run.py"), *overrides, f"hydra.run.dir={job_dir}"]


def run_isolated(cfg, job_dir: Path, overrides: list, group: str, num: int) -> dict:
    from hydra.core.hydra_config import HydraConfig

    from .naming import NAME_ENV, run_name

    gpus = visible_gpus()
    lease = GPULease(gpus) if gpus else None
    env = {**os.environ, CHILD_ENV: "1", "TRANSFORMEROP_GROUP": group, "PYTHONUNBUFFERED": "1",
           NAME_ENV: run_name(overrides, HydraConfig.get(), job_dir)}
    if lease is not None:
        env["CUDA_VISIBLE_DEVICES"] = lease.gpu
    before = tracking.read_results(job_dir)
    where = f" on GPU {lease.gpu}" if lease else ""
    log.info(f"[{num}] fresh process{where}: {' '.join(overrides)}")
    try:
        proc = subprocess.Popen(child_command(overrides, job_dir), cwd=os.getcwd(), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        for line in proc.stdout:  # relayed with the job number: parallel jobs stay readable
            sys.stdout.write(f"[{num}] {line}")
        code = proc.wait()
    finally:
        if lease is not None:
            lease.close()
    record = tracking.read_results(job_dir)
    if record is None or record == before:  # the child died before recording (killed, or bad input)
        tracker = tracking.Tracker(cfg, job_dir, cfg.task.name, overrides, group, [], env[NAME_ENV])
        tracker.start()
        err = {"type": "ChildProcessError", "message": f"the job's process exited with code {code} without a "
               f"record (its output is above and in {job_dir / tracking.CONSOLE})", "traceback": ""}
        import torch

        from .runtime import env_info
        return tracker.finish("failed", err, env_info(torch.device("cpu")))
    return record
