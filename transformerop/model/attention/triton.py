"""Fused causal attention through the Triton kernels in kernels/triton_attention.py.

Forward and backward are Triton kernels (backward = "kernel"). Attention dropout (model.dropout,
in training) is fused into both: the backward regenerates the forward's mask from its seed.
fp32 matmuls use TF32 tensor cores unless `attention.allow_tf32=false` is given. Decoding works
against a KV cache (decode=kv_cache); an explicit mask (decode=static) is refused.
"""
import functools
import importlib
import os
import sys
from pathlib import Path

import torch

from .base import BackendUnavailable, CausalSelfAttention


@functools.cache  # attend() runs per layer per step: import once
def _kernels():
    """Import kernels.triton_attention; kernels/ sits at the repo root, beside the package."""
    try:
        return importlib.import_module("kernels.triton_attention")
    except ModuleNotFoundError as e:
        if e.name not in ("kernels", "kernels.triton_attention"):
            raise
        sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
        return importlib.import_module("kernels.triton_attention")


class TritonAttention(CausalSelfAttention):
    supports_cache = True
    accepts_mask = False  # causal only: decode=kv_cache, not the masked preallocated caches
    dtypes = ("float32", "bfloat16")
    backward = "kernel"

    def __init__(self, mcfg, acfg):
        super().__init__(mcfg, acfg)
        self.allow_tf32 = bool(getattr(acfg, "allow_tf32", True))  # schema default True; bare dicts too
        _kernels()  # import now: a missing kernels/ fails at build, not mid-step

    @classmethod
    def check(cls, cfg, device):
        super().check(cfg, device)
        interpret = os.environ.get("TRITON_INTERPRET") == "1"
        if not interpret and (torch.device(device).type != "cuda" or not torch.cuda.is_available()):
            raise BackendUnavailable("attention=triton needs a CUDA GPU (none here; TRITON_INTERPRET=1 "
                                     "runs it on CPU, slowly)")
        try:
            import triton  # noqa: F401
        except ImportError as e:
            raise BackendUnavailable(f"attention=triton needs the triton package ({e})") from None

    def attend(self, q, k, v, mask):
        if mask is not None:
            raise ValueError("attention=triton does not take an explicit mask (decode=static); "
                             "use decode=kv_cache")
        p = self.dropout if self.training else 0.0
        return _kernels().attention(q, k, v, causal=True, sm_scale=self.scale, allow_tf32=self.allow_tf32,
                                    dropout_p=p)
