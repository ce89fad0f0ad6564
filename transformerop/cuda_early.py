"""The CUDA driver and the GPU's primary context, started in a background thread while run.py
imports torch and Hydra: the job's first CUDA call (torch's lazy init: the driver's cuInit, then
the context every CUDA runtime user shares) then finds both made, and start-up does not pay for
them after the imports. ctypes releases the GIL inside each driver call, so the imports go on
meanwhile. Nothing here imports torch: this must run before it."""
import atexit
import ctypes
import os
import sys
import threading

JOIN_S = 10.0  # at exit: a driver call cut off by the interpreter's teardown could crash it
# Hydra's flags for a launch that runs no job here: a multirun's parent (its jobs may each be a
# process of their own: sweep.isolate), or one that only prints
NO_JOB_HERE = {"-m", "--multirun", "--cfg", "-c", "--info", "-i", "--help", "-h", "--hydra-help", "--version",
               "--shell-completion", "-sc"}


def wanted(argv: list, environ) -> bool:
    """False for a run that stays off the GPU (device=cpu, no visible GPU, the Triton interpreter)
    and for a launch that runs no job in this process (NO_JOB_HERE, hydra.mode=MULTIRUN): a
    context there would hold GPU memory for nothing."""
    if environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1") or environ.get("TRITON_INTERPRET") == "1":
        return False
    for a in argv[1:]:
        if a in NO_JOB_HERE or a in ("device=cpu", "device=mps") or a.lstrip("+~").startswith("hydra.mode="):
            return False
    return True


def ordinal(argv: list, environ) -> int | None:
    """The GPU this process will use: device=cuda:N's, else LOCAL_RANK's under torchrun, else the
    first; None when a value does not parse (the job's own checks then say what is wrong)."""
    value = environ.get("LOCAL_RANK", "0")
    for a in argv[1:]:
        if a.startswith("device=cuda:"):
            value = a.split(":", 1)[1]
    return int(value) if value.isdigit() else None


def _init(gpu: int) -> None:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return  # no NVIDIA driver here: the job picks another device
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    if cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), gpu) == 0:
        cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)  # kept: torch uses the same context


def start(argv: list | None = None, environ=None) -> threading.Thread | None:
    """Start the driver and the primary context of this process's GPU (ordinal) in a daemon
    thread, unless the run stays off the GPU; returns the thread."""
    argv, environ = sys.argv if argv is None else argv, os.environ if environ is None else environ
    gpu = ordinal(argv, environ)
    if not wanted(argv, environ) or gpu is None:
        return None
    thread = threading.Thread(target=_init, args=(gpu,), name="cuda-early", daemon=True)
    thread.start()
    atexit.register(thread.join, JOIN_S)
    return thread
