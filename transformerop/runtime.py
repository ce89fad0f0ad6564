"""Device choice, seeding, dtype and environment facts shared by every task."""
import contextlib
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


def autocast(device: torch.device, dtype_name: str):
    """bf16 autocast where it exists (CUDA); fp32 runs with no context at all."""
    if dtype_name == "bfloat16" and device.type in ("cuda", "cpu"):
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
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


def git_sha() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def env_info(device: torch.device) -> dict:
    info = {"device": str(device), "torch": torch.__version__, "cuda": torch.version.cuda,
            "git_sha": git_sha(), "hostname": os.uname().nodename, "cpu_threads": torch.get_num_threads()}
    try:
        import triton
        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    info["device_name"] = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return info
