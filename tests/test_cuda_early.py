"""run.py starts the CUDA driver and the GPU's primary context while it imports (transformerop/
cuda_early.py): only for runs that may use the GPU here, harmless where there is no driver or a
value does not parse, and on a GPU the primary context exists before torch is imported. Then it
warms torch's CUDA state, cuBLAS and cuDNN while Hydra composes: nothing where nothing started,
done before the job's own CUDA work, which (a CUDA graph capture included) then runs as usual."""
import subprocess
import sys
import threading

import pytest

from transformerop import cuda_early


@pytest.mark.parametrize("argv,env,expect", [
    (["run.py"], {}, True),
    (["run.py", "experiment=speedrun", "train.progress=false"], {}, True),
    (["run.py", "--config-name", "config"], {}, True),
    (["run.py", "device=cpu"], {}, False),
    (["run.py", "-m", "attention=naive,sdpa"], {}, False),
    (["run.py", "--multirun", "x=1,2"], {}, False),
    (["run.py", "hydra.mode=MULTIRUN", "attention=naive,sdpa"], {}, False),
    (["run.py", "--cfg", "job"], {}, False),
    (["run.py"], {"CUDA_VISIBLE_DEVICES": ""}, False),
    (["run.py"], {"TRITON_INTERPRET": "1"}, False),
])
def test_which_runs_start_cuda_early(argv, env, expect):
    assert cuda_early.wanted(argv, env) is expect


@pytest.mark.parametrize("argv,env,gpu", [
    (["run.py"], {}, 0), (["run.py", "device=cuda:2"], {}, 2), (["run.py"], {"LOCAL_RANK": "3"}, 3),
    (["run.py", "device=cuda:x"], {}, None), (["run.py"], {"LOCAL_RANK": "a"}, None),
    (["run.py", "device=cuda:0"], {"LOCAL_RANK": "1", "WORLD_SIZE": "2"}, 1)])  # torchrun: each rank its own
def test_the_gpu_it_starts_and_no_crash_on_a_bad_value(argv, env, gpu):
    """A value that does not parse starts nothing here: the job's own checks report it."""
    assert cuda_early.ordinal(argv, env) == gpu
    if gpu is None:
        assert cuda_early.start(argv, env) is None


def test_no_thread_for_a_cpu_run_and_a_quiet_one_without_a_driver(monkeypatch):
    assert cuda_early.start(["run.py", "device=cpu"], {}) is None
    cuda_early._init(0)  # here: no libcuda (CPU CI) or a real GPU; either way it returns
    errors = []  # an exception in the thread would otherwise only warn
    monkeypatch.setattr(threading, "excepthook", errors.append)
    thread = cuda_early.start(["run.py"], {})
    thread.join(30)
    assert not thread.is_alive() and errors == []


EARLY = """
import ctypes
from transformerop import cuda_early
cuda_early.start(["run.py"], {}).join(60)
cuda = ctypes.CDLL("libcuda.so.1")
dev, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)) == 0
print("ACTIVE_BEFORE_TORCH", active.value)
import torch
x = torch.ones(4, device="cuda") * 2
print("TORCH_AFTER", x.sum().item())
"""


@pytest.mark.gpu
def test_the_early_start_makes_the_primary_context_before_torch():
    out = subprocess.run([sys.executable, "-c", EARLY], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert lines["ACTIVE_BEFORE_TORCH"] == "1"
    assert lines["TORCH_AFTER"] == "8.0"  # torch (which uses the primary context) runs on it


def test_the_warm_up_runs_only_after_an_early_start_and_says_when_it_failed(monkeypatch, caplog):
    for name in ("_early", "_gpu", "_warming", "warm_error"):  # this process's own start() left them set
        monkeypatch.setattr(cuda_early, name, None)
    monkeypatch.setattr(cuda_early.atexit, "register", lambda *a: None)
    assert cuda_early.warm() is None  # start() started nothing (a CPU or multirun launch)
    cuda_early.settle()  # and there is nothing to wait for
    assert cuda_early.start(["run.py"], {}) is not None
    thread = cuda_early.warm()
    assert thread is not None and cuda_early.warm() is thread  # one warm-up a process
    cuda_early.settle()
    assert "warm-up failed" not in caplog.text  # here: no GPU, it returns; on a GPU, it warmed it
    import torch  # a fault in the thread: logged by settle(), once
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1 / 0)
    monkeypatch.setattr(cuda_early, "_warming", None)
    cuda_early.warm()
    cuda_early.settle()
    cuda_early.settle()
    assert caplog.text.count("the GPU warm-up failed: ZeroDivisionError") == 1


def test_kernel_warm_ups_run_at_once_before_settle_returns_and_say_when_one_failed(monkeypatch, caplog):
    """warm_kernels: nothing without an early start; else every call runs, each in a thread of its
    own at once (the pool), all done when settle() returns; a failing call is logged by settle()."""
    import contextlib

    import torch
    for name in ("_early", "_gpu", "_warming", "_kernels", "warm_error"):
        monkeypatch.setattr(cuda_early, name, None)
    monkeypatch.setattr(cuda_early.atexit, "register", lambda *a: None)
    asked = []
    assert cuda_early.warm_kernels(asked.append) is None and asked == []  # start() started nothing
    assert cuda_early.start(["run.py"], {}) is not None
    # a CPU machine has no GPU: stand in for one so the calls run (their launches are the GPU tests')
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "device", lambda gpu: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda gpu=None: None)
    arrived, threads = threading.Barrier(3, timeout=30), set()

    def call():  # the three pass the barrier only if all three run at the same time
        threads.add(threading.get_ident())
        arrived.wait()

    monkeypatch.setattr(cuda_early, "ended", {})
    before = cuda_early.time.time()
    cuda_early.warm_kernels(lambda device: [call, call, call])
    cuda_early.settle()
    assert len(threads) == 3 and "warm-up failed" not in caplog.text
    assert before <= cuda_early.ended["kernels"] <= cuda_early.time.time()  # stamped once all three ended

    def broken():
        raise RuntimeError("no such kernel")
    cuda_early.warm_kernels(lambda device: [broken])
    cuda_early.settle()
    cuda_early.settle()
    assert caplog.text.count("the GPU warm-up failed: RuntimeError: no such kernel") == 1


def test_warm_up_parts_are_reported_on_the_jobs_clock_in_the_order_they_ended(monkeypatch):
    """ended_on(origin): each part's end in seconds from origin, earliest first; a part that ended
    before origin (an earlier job's, in a multirun process) is not this job's."""
    monkeypatch.setattr(cuda_early, "ended", {"kernels": 102.5, "driver": 100.25, "attention": 101.75, "cublas": 101.5})
    assert cuda_early.ended_on(100.0) == {"driver": 0.25, "cublas": 1.5, "attention": 1.75, "kernels": 2.5}
    assert list(cuda_early.ended_on(100.0)) == ["driver", "cublas", "attention", "kernels"]
    assert cuda_early.ended_on(102.0) == {"kernels": 0.5}
    assert cuda_early.ended_on(103.0) == {}


WARM = """
import torch
from transformerop import cuda_early
cuda_early.start(["run.py"], {})
cuda_early.warm()
cuda_early.settle()
print("INITIALIZED", torch.cuda.is_initialized())
x = torch.ones(8, device="cuda")
q = torch.ones(1, 1, 64, 64, device="cuda", dtype=torch.bfloat16)


def step():  # what the warm-up called first: a matmul (cuBLAS) and SDPA, in the captured graph too
    return (x[:, None] * x[None, :] @ x).sum() + torch.nn.functional.scaled_dot_product_attention(
        q, q, q, is_causal=True).float().sum() * 0


g = torch.cuda.CUDAGraph()
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    y = step()
torch.cuda.current_stream().wait_stream(s)
with torch.cuda.graph(g):
    y = step()
x.fill_(2.0)
g.replay()
print("GRAPHED", y.item())
"""


@pytest.mark.gpu
def test_after_the_warm_up_torch_is_initialised_and_a_graph_captures():
    out = subprocess.run([sys.executable, "-c", WARM], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert lines["INITIALIZED"] == "True"
    assert lines["GRAPHED"] == "512.0"  # (x x^T) x summed: 8 x 8 x 8 x 2^3, replayed on the new values
