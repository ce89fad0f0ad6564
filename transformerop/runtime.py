"""Device choice, seeding, dtype and environment facts shared by every task."""
import contextlib
import hashlib
import os
import random
import resource
import shutil
import subprocess
import tempfile

import torch

from . import REPO_ROOT

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def interpreting() -> bool:
    """Triton kernels run on the CPU through its interpreter (one program after another)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


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


def _git(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, timeout=30,
                          env={**os.environ, **(env or {})})


def worktree_tree() -> str | None:
    """The git tree hash of the files as they are (tracked and untracked, minus .gitignore), made
    in a throw-away index. Content-addressed: equal to a commit's tree exactly when the files are
    that commit's, even where .git itself is stale (a copied working tree)."""
    with tempfile.TemporaryDirectory() as d:
        index = os.path.join(d, "index")
        real = _git("rev-parse", "--git-path", "index").stdout.decode().strip()
        try:  # start from the real index: files whose stat is unchanged are not hashed again
            shutil.copyfile(REPO_ROOT / real, index)
        except OSError:
            pass
        env = {"GIT_INDEX_FILE": index}
        if _git("add", "-A", env=env).returncode != 0:
            return None
        tree = _git("write-tree", env=env).stdout.decode().strip()
    return tree or None


def git_info() -> dict:
    """The code that ran: HEAD, the tree of the files as they were (git_tree), whether they differ
    from HEAD's, and a hash of the uncommitted changes, so two dirty runs can be told apart. The
    report resolves git_tree to the commit that has it."""
    unknown = {"git_sha": "unknown", "git_commit": "unknown", "git_tree": None, "git_dirty": None,
               "git_diff_sha256": None}
    try:
        sha = _git("rev-parse", "HEAD").stdout.decode().strip()
        if not sha:
            return unknown
        tree = worktree_tree()
        head_tree = _git("rev-parse", "HEAD^{tree}").stdout.decode().strip()
        dirty = tree != head_tree
        digest = None
        if dirty:
            h = hashlib.sha256(_git("diff", "HEAD", "--binary").stdout)
            h.update((tree or "").encode())
            digest = h.hexdigest()[:16]
        return {"git_sha": sha[:7], "git_commit": sha, "git_tree": tree, "git_dirty": dirty, "git_diff_sha256": digest}
    except (OSError, subprocess.SubprocessError):
        return unknown


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
