"""Checkpoints: written atomically (temp file + rename), loaded with weights_only=True, and
refused with a clear message when they come from a different model."""
import os
from enum import Enum
from pathlib import Path

import torch

from .errors import CheckpointError

SHAPE_KEYS = ("name", "n_layer", "n_head", "n_embd", "block_size", "bias")


def model_signature(model_cfg, vocab_size: int, chars: str) -> dict:
    # plain values only (an option name is a str Enum in the config): a weights-only load refuses classes
    sig = {k: (v.value if isinstance(v, Enum) else v) for k in SHAPE_KEYS for v in [getattr(model_cfg, k)]}
    sig.update(vocab_size=vocab_size, chars=chars)
    return sig


def save(path: Path, **state) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)  # a kill at any point leaves either the old or the new file, never half of one


def load(path, signature: dict | None = None, map_location="cpu") -> dict:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist: give an existing .pt file")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # truncated, foreign or pickled code: refuse
        reason = (str(e).splitlines()[0] if str(e) else type(e).__name__).split(". ")[0]
        raise CheckpointError(f"checkpoint {path} cannot be loaded safely ({reason}): delete or move it to "
                              "start fresh, or set train.resume=false") from None
    if signature is not None:
        theirs = state.get("signature", {})
        diff = [f"{k}: checkpoint {theirs.get(k)!r} vs config {v!r}" for k, v in signature.items()
                if theirs.get(k) != v and k != "chars"]
        if theirs.get("chars") != signature.get("chars"):
            diff.append("vocabulary differs")
        if diff:
            raise CheckpointError(f"checkpoint {path} is from a different model ({'; '.join(diff)}): use the "
                                  "model config it was trained with, or train.resume=false to start fresh")
    return state
