"""Device choice, seeding, dtype and environment facts shared by every task."""
import contextlib
import hashlib
import os
import random
import resource
import subprocess

import torch

from . import REPO_ROOT

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def pick_device(name: str = "auto") -> torch.device:
    """cuda, else mps, else cpu; under torchrun each rank gets cuda:LOCAL_RANK."""
    if name in ("auto", "cuda") and torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={name}: CUDA is not available on this machine (use device=auto or cpu)")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device={name}: Apple MPS is not available on this machine")
    return dev


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def torch_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"train.dtype={name!r}: choose one of {sorted(DTYPES)}")
    return DTYPES[name]


def autocast(device: torch.device, dtype_name: str, cache: bool = True):
    """bf16 autocast where it exists (CUDA); fp32 runs with no context at all. cache=False inside
    a CUDA-graph capture: a cached weight cast made outside the capture would not be replayed."""
    if dtype_name == "bfloat16" and device.type in ("cuda", "cpu"):
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, cache_enabled=cache)
    return contextlib.nullcontext()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_bytes(device: torch.device) -> int:
    """CUDA: max allocated since the last reset. CPU: the process's peak resident set."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


def _git(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, timeout=10)


def git_info() -> dict:
    """The code that ran: commit, whether the tree had uncommitted changes (tracked or untracked
    files outside .gitignore), and a hash of those changes, so two dirty runs can be told apart."""
    try:
        sha = _git("rev-parse", "HEAD").stdout.decode().strip()
        if not sha:
            return {"git_sha": "unknown", "git_commit": "unknown", "git_dirty": None, "git_diff_sha256": None}
        diff = _git("diff", "HEAD", "--binary").stdout
        untracked = _git("ls-files", "--others", "--exclude-standard", "-z").stdout.split(b"\0")
        h = hashlib.sha256(diff)
        for name in sorted(u for u in untracked if u):
            h.update(name)
            try:
                h.update((REPO_ROOT / name.decode()).read_bytes())
            except OSError:
                pass
        dirty = bool(diff) or any(untracked)
        return {"git_sha": sha[:7], "git_commit": sha, "git_dirty": dirty,
                "git_diff_sha256": h.hexdigest()[:16] if dirty else None}
    except (OSError, subprocess.SubprocessError):
        return {"git_sha": "unknown", "git_commit": "unknown", "git_dirty": None, "git_diff_sha256": None}


def env_info(device: torch.device) -> dict:
    info = {"device": str(device), "torch": torch.__version__, "cuda": torch.version.cuda, **git_info(),
            "hostname": os.uname().nodename, "cpu_threads": torch.get_num_threads(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    try:
        import triton
        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    info["device_name"] = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return info
