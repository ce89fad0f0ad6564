"""The CUDA driver and the GPU's primary context, started in a background thread while run.py
imports torch and Hydra: the job's first CUDA call (torch's lazy init: the driver's cuInit, then
the context every CUDA runtime user shares) then finds both made, and start-up does not pay for
them after the imports. ctypes releases the GIL inside each driver call, so the imports go on
meanwhile. Nothing at this module's top imports torch: start() must run before it.

Then, once torch is imported, warm() starts a second thread (after the first's driver calls)
while Hydra composes the config: torch's own CUDA state, and the first cuBLAS and attention
(SDPA) calls, forward and backward, with tiny inputs -- their libraries load and their handles are
made on first use, a tenth of a second or more each on the H200 (cuDNN's for SDPA there). torch
releases the GIL inside its ops, so Hydra's Python goes on meanwhile; the handles go back to
torch's pool when the thread ends, for the job's thread to take. settle() waits for it before
the job's own CUDA work, as no other thread may touch the GPU while a CUDA graph is captured, and
logs what went wrong in it (the job itself then meets the same error, with this one as context).

Once the job's config is composed, warm_kernels() launches the Triton kernels its model will
launch (the model's kernel_warmups: one tiny call per kernel form) from threads of their own, all
at once: a cold Triton cache compiles each form on its first launch, which one after another in
the first step's capture took 3.0-4.3 s of the speedrun's start-up on the H200 host, and from
threads, started while the warm-up above still runs, 1.6-1.8 s
(experiments/results/h200-2026-12-02j). settle() waits for these too.

Each part stamps when it ended (`ended`: the driver, cuBLAS, torch's attention, the kernel
warm-ups); a train job logs and records them on its clock beside its start-up phases
(warmup_ended/<part>_s), so the part its `warm` phase waited for is the last one named, not a guess."""
import atexit
import ctypes
import functools
import logging
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

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
    """The GPU this process will use: LOCAL_RANK's under torchrun (WORLD_SIZE > 1: each rank takes
    its own, as transformerop/distributed.py does), else device=cuda:N's, else the first; None
    when a value does not parse (the job's own checks then say what is wrong)."""
    value = environ.get("LOCAL_RANK", "0")
    if environ.get("WORLD_SIZE", "1") in ("", "0", "1"):
        for a in argv[1:]:
            if a.startswith("device=cuda:"):
                value = a.split(":", 1)[1]
    return int(value) if value.isdigit() else None


ended: dict = {}  # part -> when it ended, on time.time()'s clock (the module's note says why)


def ended_on(origin: float) -> dict:
    """{part: seconds from origin} of the warm-up parts that ended after origin, in the order they
    ended: a later job of a multirun process sees only its own kernel warm-ups."""
    return {part: t - origin for part, t in sorted(ended.items(), key=lambda kv: kv[1]) if t >= origin}


def _init(gpu: int) -> None:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return  # no NVIDIA driver here: the job picks another device
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    if cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), gpu) == 0:
        cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)  # kept: torch uses the same context
        ended["driver"] = time.time()


def _on_gpu(early: threading.Thread, gpu: int, work) -> None:
    """A warm-up thread's body: once start()'s driver calls are done, work(gpu) on a GPU torch
    sees (else nothing: the job's own checks say what is wrong); its error is kept for settle()
    to log once logging is set up."""
    early.join()
    try:
        import torch
        if gpu < torch.cuda.device_count():
            work(gpu)
    except Exception as e:  # noqa: BLE001
        global warm_error
        warm_error = e


def _warm(gpu: int) -> None:
    import torch
    import torch.nn.functional as F
    with torch.cuda.device(gpu):  # this thread's current GPU: no context on any other (torchrun ranks)
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        x = torch.ones(1, 1, 64, 64, device=f"cuda:{gpu}", dtype=dtype, requires_grad=True)
        (x[0, 0] @ x[0, 0]).sum().backward()  # cuBLAS, forward and backward
        torch.cuda.synchronize()
        ended["cublas"] = time.time()
        F.scaled_dot_product_attention(x, x, x, is_causal=True).sum().backward()  # cuDNN (or flash) attention
        torch.cuda.synchronize()
        ended["attention"] = time.time()


def _launch_all(make_calls, gpu: int) -> None:
    import torch

    def launch(call):
        with torch.cuda.device(gpu):
            call()
    calls = make_calls(torch.device("cuda", gpu))
    if calls:
        with ThreadPoolExecutor(len(calls), thread_name_prefix="cuda-kernel") as pool:
            list(pool.map(launch, calls))  # re-raises the first call's error, if any
        torch.cuda.synchronize(gpu)
        ended["kernels"] = time.time()


_early: threading.Thread | None = None
_gpu: int | None = None
_warming: threading.Thread | None = None
_kernels: threading.Thread | None = None
warm_error: Exception | None = None  # what went wrong in a warm-up thread, if anything


def warm() -> threading.Thread | None:
    """After torch is imported: torch's CUDA state and the math libraries' first calls in a thread
    of their own, on the GPU start() chose (nothing where start() started nothing)."""
    global _warming
    if _early is None or _warming is not None:
        return _warming
    _warming = threading.Thread(target=_on_gpu, args=(_early, _gpu, _warm), name="cuda-warm", daemon=True)
    _warming.start()
    # registered after torch's and Hydra's own exit handlers, so it runs before them
    atexit.register(_warming.join, JOIN_S)
    return _warming


def warm_kernels(make_calls) -> threading.Thread | None:
    """Once the job's config is known: make_calls(device) -> zero-argument calls, each launching one
    kernel form (a model's kernel_warmups), run at once from threads on the GPU start() chose
    (nothing where start() started nothing). Their random-free launches end before settle()
    returns, so before the job seeds its generators and captures."""
    global _kernels
    if _early is None:
        return None
    _kernels = threading.Thread(target=_on_gpu, args=(_early, _gpu, functools.partial(_launch_all, make_calls)),
                                name="cuda-kernels", daemon=True)
    _kernels.start()
    atexit.register(_kernels.join, JOIN_S)
    return _kernels


def settle() -> None:
    """Wait for the warm-up threads (if any) before the job's own CUDA work, and log an error, once."""
    global warm_error, _kernels
    for thread in (_warming, _kernels):
        if thread is not None:
            thread.join()
    _kernels = None  # a later job of this process warms its own kernels
    if warm_error is not None:
        logging.getLogger(__name__).warning(f"the GPU warm-up failed: {type(warm_error).__name__}: {warm_error}")
        warm_error = None


def start(argv: list | None = None, environ=None) -> threading.Thread | None:
    """Start the driver and the primary context of this process's GPU (ordinal) in a daemon
    thread, unless the run stays off the GPU; returns the thread."""
    argv, environ = sys.argv if argv is None else argv, os.environ if environ is None else environ
    gpu = ordinal(argv, environ)
    if not wanted(argv, environ) or gpu is None:
        return None
    global _early, _gpu
    thread = threading.Thread(target=_init, args=(gpu,), name="cuda-early", daemon=True)
    thread.start()
    atexit.register(thread.join, JOIN_S)
    _early, _gpu = thread, gpu
    return thread
