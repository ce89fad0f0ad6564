"""Models: `bigram` and `gpt`, built from config (model, attention) and the data's vocab size."""
import torch

from .attention import BACKENDS, REFERENCE, BackendUnavailable, get_backend
from .bigram import Bigram
from .gpt import GPT

MODELS = {"gpt": GPT, "bigram": Bigram}


def validate_model_config(cfg) -> None:
    """Impossible shapes fail here, before any data is loaded or output written."""
    m = cfg.model
    if m.name not in MODELS:
        raise ValueError(f"model.name={m.name!r}: choose one of {sorted(MODELS)}")
    if m.name == "gpt":
        for key in ("n_layer", "n_head", "n_embd", "block_size"):
            if getattr(m, key) < 1:
                raise ValueError(f"model.{key}={getattr(m, key)} must be >= 1")
        if m.n_embd % m.n_head != 0:
            raise ValueError(f"model.n_embd={m.n_embd} is not divisible by model.n_head={m.n_head}")
    if not 0.0 <= m.dropout < 1.0:
        raise ValueError(f"model.dropout={m.dropout} must be in [0, 1)")


def build_model(cfg, vocab_size: int, device=None):
    """The model with its parameters made and initialised on `device` (default CPU): a GPU draws
    the initial weights with its own seeded generator in microseconds, where building on the CPU
    and copying took 0.2 s of a training job's start-up on the H200 host."""
    validate_model_config(cfg)
    with torch.device(device or "cpu"):
        return MODELS[cfg.model.name](cfg.model, cfg.attention, vocab_size)


def kernel_warmups(cfg, device) -> list:
    """The configured model's kernel warm-up calls (its class's kernel_warmups), none if it has none."""
    warm = getattr(MODELS[cfg.model.name], "kernel_warmups", None)
    return warm(cfg, device) if warm is not None else []


def count_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["GPT", "Bigram", "MODELS", "build_model", "validate_model_config", "count_params", "kernel_warmups",
           "BACKENDS", "REFERENCE", "BackendUnavailable", "get_backend"]
