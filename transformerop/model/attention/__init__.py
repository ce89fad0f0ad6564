"""Attention backend registry: one file per backend, one line here. Values are import paths so
a backend's heavy dependencies (a CUDA build, Triton) load only when it is chosen."""
import importlib

from .base import BackendUnavailable, CausalSelfAttention, causal_mask

BACKENDS = {
    "naive_loop": "transformerop.model.attention.naive_loop:NaiveLoopAttention",
    "naive": "transformerop.model.attention.naive:NaiveAttention",
    "sdpa": "transformerop.model.attention.sdpa:SDPAAttention",
    "cuda": "transformerop.model.attention.cuda:CudaAttention",
    "triton": "transformerop.model.attention.triton:TritonAttention",
}


REFERENCE = "sdpa"  # the known-good backend: calibration's tiny model and validate's decode rows use it


def get_backend(name: str):
    if name not in BACKENDS:
        raise ValueError(f"attention.name={name!r}: choose one of {sorted(BACKENDS)}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)


__all__ = ["BACKENDS", "REFERENCE", "get_backend", "BackendUnavailable", "CausalSelfAttention", "causal_mask"]
