"""The lock torch's extension builds share, made safe to wait on.

torch serializes builds with a `lock` file in the build directory (FileBaton): a waiting
process polls until the file disappears, forever, so a build killed mid-way hangs every later
run. The builder records itself (`builder.pid`, see `claim`) and a waiter raises StaleBuildLock
naming the file when nobody holds it.
"""
import os
import socket
import time
from pathlib import Path

STALE_LOCK_S = 60 * float(os.environ.get("TRANSFORMEROP_LOCK_STALE_MIN", "10"))  # owner unknown
DEAD_OWNER_GRACE_S = 30.0  # owner recorded and gone: the lock is left over
MAX_WAIT_S = 30 * 60.0  # a live build that takes longer than this is reported, not waited on


class StaleBuildLock(RuntimeError):
    """A build lock is held by no live process: torch would wait on it forever."""


def claim(build_dir: Path) -> None:
    """Record this process as the builder of build_dir."""
    (Path(build_dir) / "builder.pid").write_text(f"{socket.gethostname()} {os.getpid()}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, someone else's
    return True


def _lock_owner(build_dir: Path):
    """(alive, description) of whoever wrote builder.pid; alive is None when unknown."""
    try:
        host, pid = (build_dir / "builder.pid").read_text().split()
        pid = int(pid)
    except (OSError, ValueError):
        return None, "owner unknown"
    if host != socket.gethostname() or pid == os.getpid():
        return None, f"recorded owner {host}:{pid}"
    return _pid_alive(pid), f"pid {pid} {'running' if _pid_alive(pid) else 'no longer running'}"


def lock_is_busy(build_dir: Path, stale_after_s: float = STALE_LOCK_S) -> bool:
    """False: no lock. True: a build holds it (wait). Raises StaleBuildLock when nobody does."""
    lock = Path(build_dir) / "lock"
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return False
    alive, owner = _lock_owner(Path(build_dir))
    if alive:
        return True
    if age > stale_after_s or (alive is False and age > DEAD_OWNER_GRACE_S):
        raise StaleBuildLock(
            f"stale CUDA build lock {lock} ({age:.0f} s old, {owner}): no build is running; "
            f"delete that file and retry")
    return True


def wait_for_lock(build_dir: Path) -> None:
    start = time.time()
    while lock_is_busy(build_dir):
        if time.time() - start > MAX_WAIT_S:
            raise StaleBuildLock(f"CUDA build lock {build_dir / 'lock'} still held after {MAX_WAIT_S:.0f} s; "
                                 f"if no build is running, delete it and retry")
        time.sleep(0.5)
