"""run.py starts the CUDA driver and the GPU's primary context while it imports (transformerop/
cuda_early.py): only for runs that may use the GPU, harmless where there is no driver, and on a
GPU the context torch then uses."""
import subprocess
import sys

import pytest

from transformerop import cuda_early


@pytest.mark.parametrize("argv,env,expect", [
    (["run.py"], {}, True),
    (["run.py", "experiment=speedrun", "train.progress=false"], {}, True),
    (["run.py", "device=cpu"], {}, False),
    (["run.py", "-m", "attention=naive,sdpa"], {}, False),
    (["run.py", "--multirun", "x=1,2"], {}, False),
    (["run.py", "--cfg", "job"], {}, False),
    (["run.py"], {"CUDA_VISIBLE_DEVICES": ""}, False),
    (["run.py"], {"TRITON_INTERPRET": "1"}, False),
])
def test_which_runs_start_cuda_early(argv, env, expect):
    assert cuda_early.wanted(argv, env) is expect


def test_no_thread_for_a_cpu_run_and_a_quiet_one_without_a_driver():
    assert cuda_early.start(["run.py", "device=cpu"], {}) is None
    thread = cuda_early.start(["run.py"], {})  # here: no libcuda (CPU CI) or a real GPU; either way no error
    thread.join(30)
    assert not thread.is_alive()


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
ctx = ctypes.c_void_p()
x = torch.ones(4, device="cuda") * 2
cuda.cuCtxGetCurrent(ctypes.byref(ctx))
primary = ctypes.c_void_p()
cuda.cuDevicePrimaryCtxRetain(ctypes.byref(primary), dev)
print("TORCH_USES_PRIMARY", ctx.value == primary.value, x.sum().item())
"""


@pytest.mark.gpu
def test_the_early_context_is_the_one_torch_uses():
    out = subprocess.run([sys.executable, "-c", EARLY], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert lines["ACTIVE_BEFORE_TORCH"] == "1"
    assert lines["TORCH_USES_PRIMARY"] == "True 8.0"
