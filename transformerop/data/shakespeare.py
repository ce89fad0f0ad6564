"""Tiny Shakespeare: cached file, sha256-verified, downloaded only when missing, 90/10 split."""
import hashlib
import os
import urllib.request
from pathlib import Path

import torch

from .. import REPO_ROOT
from .tokenizer import CharTokenizer

FILENAME = "tinyshakespeare.txt"


class DataError(RuntimeError):
    """Missing or corrupt data: raised before any training work starts."""


def cache_dir(cfg) -> Path:
    d = cfg.cache_dir or os.environ.get("TRANSFORMEROP_DATA") or REPO_ROOT / "data"
    return Path(d).expanduser().resolve()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(cfg) -> Path:
    path = cache_dir(cfg) / FILENAME
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".part")
        try:
            urllib.request.urlretrieve(cfg.url, tmp)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise DataError(
                f"Tiny Shakespeare is not cached and could not be downloaded ({e}). "
                f"Put the file (sha256 {cfg.sha256}) at {path}, "
                f"or set data.cache_dir / $TRANSFORMEROP_DATA to a folder holding {FILENAME}."
            ) from None
        tmp.replace(path)
    digest = _sha256(path)
    if digest != cfg.sha256:
        raise DataError(
            f"{path} is corrupt: sha256 {digest}, expected {cfg.sha256}. Delete it to re-download, "
            f"or replace it with the canonical file."
        )
    return path


class ShakespeareData:
    """Whole corpus resident on the device; batches are random windows sampled there."""

    kind = "text"

    def __init__(self, cfg, block_size: int, device):
        text = fetch(cfg).read_text(encoding="utf-8")
        self.tokenizer = CharTokenizer(text)
        ids = torch.tensor(self.tokenizer.encode(text), dtype=torch.long)
        n = int(cfg.train_frac * len(ids))
        self.splits = {"train": ids[:n].to(device), "val": ids[n:].to(device)}
        self.block_size = block_size
        self.device = device
        self._offsets = torch.arange(block_size + 1, device=device)

    def batch(self, split: str, batch_size: int, generator=None):
        data = self.splits[split]
        starts = torch.randint(len(data) - self.block_size - 1, (batch_size, 1), device=self.device,
                               generator=generator)
        window = data[starts + self._offsets]  # (B, T+1) gathered on the device
        return window[:, :-1], window[:, 1:]

    def eval_batches(self, split: str, batch_size: int):
        """Every non-overlapping window of the split, once: the full-split loss."""
        data = self.splits[split]
        T = self.block_size
        n = (len(data) - 1) // T
        x = data[: n * T].view(n, T)
        y = data[1: n * T + 1].view(n, T)
        for i in range(0, n, batch_size):
            yield x[i:i + batch_size], y[i:i + batch_size]
