"""Launching a Triton kernel with little host work: these attention kernels take µs on the GPU,
and on the H200 host Python's launch path took longer than that (experiments/results/h200-2026-11-30/notes_triton.md).

First call per tuning key: the config kernels/triton_tuned.json ships for this GPU's
architecture, else the autotuner's pick (it times each, then launches the best). Later calls: that
config. The first of those goes through the JIT, which compiles or finds the
kernel and hands back the CompiledKernel; from then on the CompiledKernel is launched directly,
skipping the JIT's argument binding and cache lookup. A compiled kernel is specialized on its
arguments (16-byte aligned pointers, ints divisible by 16 or equal to 1), so it is cached under
that same signature, computed here. If the direct launch ever fails (its calling convention is
triton-internal), it is switched off for the process with a warning, the JIT is used, and the
job's results.json records why (triton_launch_fallback).
"""
import contextlib
import logging
import threading

import torch

from . import triton_tuned

log = logging.getLogger(__name__)

fast = True  # direct CompiledKernel launches; tests compare them with the JIT path
fallback_error = None  # why direct launches were switched off (recorded in results.json; the GPU suite fails on it)
stats = {"direct": 0, "jit": 0, "tuned": 0, "shipped": 0}
_tuned = {}  # tuning key -> chosen config (BLOCK_M, BLOCK_N, num_warps, num_stages)
_compiled = {}  # (tuning key, argument signature) -> CompiledKernel
# (config, CompiledKernel) of the latest launch, None while tuning: the C++ launcher adopts it
last_launch = (None, None)


_local = threading.local()


@contextlib.contextmanager
def shipped_only():
    """Inside (this thread): a launch whose key has no config yet is skipped, not autotuned (one
    candidate alone, as under the interpreter, is launched: nothing to time). Warm-ups
    run beside other threads' kernels, which would skew the tuner's timings; the job's own first
    call tunes it instead."""
    _local.shipped_only = True
    try:
        yield
    finally:
        _local.shipped_only = False


def _signature(args) -> tuple:
    return tuple(a.data_ptr() % 16 == 0 if isinstance(a, torch.Tensor)
                 else (a % 16 == 0, a == 1) if isinstance(a, int) and not isinstance(a, bool) else None
                 for a in args)


def launch(kernel, grid, key, force, args, consts):
    """Launch autotuned `kernel` on positional `args` then constexpr `consts` (a dict in the
    kernel's parameter order, before the tuned BLOCK_M, BLOCK_N). grid(cfg) -> (x, y)."""
    global fast, fallback_error, last_launch
    cfg = force or _tuned.get(key)
    if cfg is None and (cfg := triton_tuned.lookup(key)) is not None:
        _tuned[key] = cfg
        stats["shipped"] += 1
    last_launch = (cfg, None)
    if cfg is None and getattr(_local, "shipped_only", False) and len(getattr(kernel, "configs", ())) > 1:
        return
    if cfg is None:
        kernel[grid](*args, **consts)
        stats["tuned"] += 1
        best = getattr(kernel, "best_config", None)
        if best is not None:
            _tuned[key] = dict(best.kwargs, num_warps=best.num_warps, num_stages=best.num_stages)
        return
    x, y = grid(cfg)
    ck = (key, _signature(args)) if fast and force is None else None
    compiled = _compiled.get(ck) if ck else None
    if compiled is not None:
        try:
            compiled[(x, y, 1)](*args, *consts.values(), cfg["BLOCK_M"], cfg["BLOCK_N"])
            stats["direct"] += 1
            last_launch = (cfg, compiled)
            return
        except Exception as e:  # noqa: BLE001 -- triton-internal API: fall back, once, loudly
            fast = False
            fallback_error = f"{type(e).__name__}: {e}"
            log.warning(f"triton_launch: direct launch failed ({fallback_error}); using the JIT path")
    compiled = kernel.fn[(x, y)](*args, **consts, **cfg)
    stats["jit"] += 1
    last_launch = (cfg, compiled)
    if ck and compiled is not None and hasattr(compiled, "run"):
        _compiled[ck] = compiled
