"""The Triton attention as a C++ dispatcher op with a C++ autograd node and a C++ kernel launch
(the C++: kernels/triton_attention_op.cpp; the kernels: kernels/triton_attention_kernels.py).

Why: the kernels take tens of µs at the model's shape, and on the H200 the Python around them (an
autograd.Function, its backward node taking the GIL on the autograd thread, Triton's launch code)
cost more host time than the GPU work (experiments/results/h200-2026-12-01f). Through this op an
eager forward+backward runs no Python once a shape has been seen: torch.ops.tfo_triton.attention
-> the C++ autograd node -> cuLaunchKernel of the very CompiledKernel the Triton path chose.

The first call for a key (kernel, dtype, precision, buckets of the lengths, what Triton
specializes on) calls back into `_miss` here: it runs the Python path (which tunes on its first
call, then compiles), and hands the C++ side that launch's CUfunction. A kernel the C++ side
refuses (scratch memory, a parameter layout it does not expect) stays on the Python path, and
the reason is kept in `refused` (results.json records it). Fake implementations make the op
traceable by torch.compile.
"""
import functools
import logging
from pathlib import Path

import torch

from . import cuda_build, triton_launch
from . import triton_attention as TA

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_suffix(".cpp")
EXTENSION = cuda_build.Extension("tfo_triton_op", "the Triton attention's C++ launcher",
                                 lambda: ([SOURCE.read_text()], []),
                                 ("register_kernel", "set_fallback", "stats", "clear"))
refused: dict = {}  # key -> why the C++ side did not adopt that kernel
_adopted: dict = {}  # key -> CompiledKernel: kept alive, since Triton unloads a kernel's module when it is freed


def require(device=None) -> None:
    """BackendUnavailable, one line naming what is missing and the way round it, unless the op
    can be built and run."""
    try:
        cuda_build.require_cuda("attention.cpp_launch=true (the Triton attention's C++ launcher)", device, EXTENSION)
    except cuda_build.BackendUnavailable as e:
        raise cuda_build.BackendUnavailable(f"{e}; or set attention.cpp_launch=false (Python launches)") from None


@functools.cache
def load():
    """The built extension, with its Python miss handler set (once per process)."""
    module = cuda_build.load(ext=EXTENSION)
    module.set_fallback(_miss)
    _register_fakes()
    return module


def _adopt(key: str) -> None:
    """Hand the kernel the Python path just launched to the C++ side (not the tuning call)."""
    cfg, compiled = triton_launch.last_launch
    if compiled is None or key in refused or TA.force_configs is not None:
        return
    md = compiled.metadata
    scratch = getattr(md, "global_scratch_size", 0) + getattr(md, "profile_scratch_size", 0)
    if getattr(md, "num_ctas", 1) != 1 or getattr(md, "launch_cooperative_grid", False) or \
            getattr(md, "launch_pdl", False):
        why = "the kernel needs launch attributes (clusters, cooperative or PDL launch)"
    elif not getattr(compiled, "function", None):
        why = "the CompiledKernel has no loaded CUfunction"
    else:
        _adopted[key] = compiled
        why = load().register_kernel(key, int(compiled.function), int(cfg["BLOCK_M"]), int(md.num_warps),
                                     int(md.shared), int(scratch)) or None
    if why:
        refused[key] = why
        log.warning(f"triton_attention_op: {key} stays on the Python launch path: {why}")


def _miss(kind, key, args):
    """C++ found no kernel for `key`: run the Python path once, then adopt what it launched."""
    out = TA._forward(*args) if kind == "fwd" else TA._backward(*args)  # C++ has set the device
    _adopt(key)
    return tuple(out)


def attention(q, k, v, causal, sm_scale, allow_tf32, dropout_p, seed, atomic_dq=False):
    return torch.ops.tfo_triton.attention(q, k, v, causal, sm_scale, allow_tf32, dropout_p, seed, atomic_dq)


def stats() -> dict:
    """Launches from C++ (cpp), calls that went to Python (python), kernels adopted, refusals."""
    return {**load().stats(), "refused": dict(refused)} if load.cache_info().currsize else {}


@functools.cache
def _register_fakes():
    def bthd(like, T):
        B, H, _, D = like.shape
        return like.new_empty((B, T, H, D)).transpose(1, 2)

    @torch.library.register_fake("tfo_triton::attn_fwd")
    def _fwd(q, k, v, causal, sm_scale, allow_tf32, dropout_p, seed):
        B, H, t_q, _ = q.shape
        return (bthd(q, t_q), q.new_empty((B * H, t_q), dtype=torch.float32),
                q.new_empty((1 if dropout_p > 0 else 0,), dtype=torch.int64))

    @torch.library.register_fake("tfo_triton::attn_bwd")
    def _bwd(grad_out, q, k, v, out, lse, causal, sm_scale, allow_tf32, dropout_p, seed, atomic_dq=False):
        return TA._grads_like(q, k, v)  # the real op's layout rule (strides only: it reads on fake tensors)

    @torch.library.register_fake("tfo_triton::attention")
    def _attention(q, k, v, causal, sm_scale, allow_tf32, dropout_p, seed, atomic_dq=False):
        return bthd(q, q.shape[2])
