"""The job's wall clock, counted from the moment a user would start counting: the launch of the
process (`python run.py ...`: imports, Hydra, CUDA init, W&B all on the clock).

Only the first job of a process owns that launch. A later job of the same multirun process
(Hydra's basic launcher runs jobs one after another in one process) starts after imports and
CUDA init were paid by an earlier job, so its times are counted from its own start and are
named `job_*` instead, never passed off as time from launch; `sweep.isolate=true` runs every
job of a sweep in its own fresh process, where time from launch is measured for real."""
import os
import threading
import time

_jobs_started = 0
_job_start = None
_imported_at = None
_marks: dict = {}
# Set once the job's start-up is over (its first train step done; else when the job ends): work
# that can wait -- starting the W&B run -- waits for it instead of taking the GIL from start-up.
startup_over = threading.Event()
# Set once a train job's loop and its timed work after it (sample, profile) are over (other tasks:
# when the job ends): logger.start=train_end waits for it.
train_over = threading.Event()


def process_start() -> float | None:
    """When this process started (Linux /proc), in seconds since the epoch."""
    return start_of("self")


def start_of(pid) -> float | None:
    """When process `pid` started, on time.time()'s clock. /proc gives its start in clock ticks
    since boot; its age is then read off CLOCK_BOOTTIME, the clock those ticks count on. (The boot
    time /proc/stat gives is truncated to whole seconds: adding the ticks to it would put every
    launch up to a second too early, a different error on every machine.)"""
    try:
        ticks = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def imports_done() -> None:
    """Called by run.py once its imports are done: what Hydra does next (composing the config, the
    run dir, a single run's config checks) is its own start-up phase."""
    global _imported_at
    _imported_at = time.time()


def job_started() -> None:
    """Called by the job runner as each job starts."""
    global _jobs_started, _job_start
    _jobs_started += 1
    _job_start = time.time()
    _marks.clear()
    startup_over.clear()
    train_over.clear()


def fresh() -> bool:
    """True when this job is its process's first: its clock starts at the process launch."""
    return _jobs_started <= 1 and process_start() is not None


def origin() -> float:
    """Time zero of this job's clock: the process launch if fresh, else the job's own start."""
    return (process_start() if fresh() else None) or _job_start or time.time()


def since_origin() -> float:
    return time.time() - origin()


def prefix() -> str:
    """Metric-name prefix for times on this clock: '' from launch, 'job_' from the job's start."""
    return "" if fresh() else "job_"


def mark(phase: str) -> float:
    """Record that start-up phase `phase` ended now; returns that time on this job's clock."""
    _marks[phase] = since_origin()
    return _marks[phase]


def mark_launch() -> None:
    """At the job's start: a fresh job's launch splits into `imports` (the interpreter and run.py's
    imports) and `hydra` (from there to the job's start; an entry point that never called
    imports_done() marks it all `imports`); a later job of the process has neither to pay, and
    marks only `hydra` (~0)."""
    if fresh():
        if _imported_at is None:  # an entry point other than run.py: no split to make
            mark("imports")
            return
        _marks["imports"] = _imported_at - origin()
    mark("hydra")


def end_startup() -> float:
    """The first train step is done: start-up ends here (marked `first_step`)."""
    t = mark("first_step")
    startup_over.set()
    return t


def phases() -> dict:
    """Each start-up phase's own duration, in the order they ended: {phase: seconds}."""
    out, last = {}, 0.0
    for name, t in _marks.items():
        out[name], last = t - last, t
    return out


def run_stamp() -> str:
    """The run dir's time stamp. Under torchrun every rank must name the same dir, so ranks use
    the start time of their common parent (the torchrun agent) instead of their own clock."""
    when = (start_of(os.getppid()) if "LOCAL_RANK" in os.environ else None) or time.time()
    return time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(when))
