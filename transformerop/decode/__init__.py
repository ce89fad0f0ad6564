"""Decode paths: prompt prefill, then one token at a time, sampled on the device.

One path = one module here + one line in PATHS (decode/registry.py). A path is a class
(decode/base.py: DecodePath) that says how a window is prefilled and how one new token goes
through the model, and declares
what the rest of the tool needs to know: whether it keeps a KV cache, attends under an explicit
mask, replays a captured CUDA graph or compiles its step, what it needs to run, and how many
kernels one token costs (the prediction's launch term). The loop that drives every path, the
window rule past block_size and the sampling live in decode/loop.py.
"""
from ..errors import BackendUnavailable
from .loop import Decoder, generate, timed_generation
from .registry import PATHS, REFERENCE, get_path
from .sampling import gumbel_noise, sample_next


def check(cfg, device) -> None:
    """Raise ValueError for a decode/attention combination that cannot work, BackendUnavailable for
    one that cannot run on this machine; before any work is done."""
    from ..model import get_backend

    path = get_path(cfg.decode.name)
    gelu = str(getattr(cfg.model, "gelu", "erf"))
    if cfg.model.name == "gpt" and gelu not in path.gelus:
        raise ValueError(f"decode={cfg.decode.name} computes the {' or '.join(path.gelus)} GELU in its kernels, "
                         f"model.gelu={gelu}: use model.gelu={path.gelus[0]} or a path that runs the model's own "
                         f"modules (decode={REFERENCE})")
    keep, W = getattr(cfg.decode, "keep", None), getattr(cfg.model, "block_size", None)
    if keep is not None and W is not None and keep > W:
        raise ValueError(f"decode.keep={keep} > model.block_size={W}: the window restarts on at most block_size "
                         f"tokens; set decode.keep between 1 and {W} (or leave it unset: block_size // 2)")
    path.check(cfg, device)
    if cfg.model.name == "bigram" or not path.cached:  # a bigram's next token needs no cache
        return
    backend = get_backend(cfg.attention.name)
    if not backend.supports_cache:
        raise ValueError(f"attention={cfg.attention.name} cannot attend against a KV cache (decode="
                         f"{cfg.decode.name}): use decode={REFERENCE}, or an attention backend that supports a cache")
    if path.masked and not backend.accepts_mask:
        raise ValueError(f"decode={cfg.decode.name} attends over a preallocated cache under an explicit mask, which "
                         f"attention={cfg.attention.name} refuses: use a decode path without one")


__all__ = ["PATHS", "REFERENCE", "get_path", "check", "Decoder", "generate", "timed_generation", "gumbel_noise",
           "sample_next", "BackendUnavailable"]
