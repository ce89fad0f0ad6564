"""Character-level text: Tiny Shakespeare (cached, sha256-verified, downloaded only when missing)
or a text file shipped with the package (the CPU tests' sample play). 90/10 split by position."""
import hashlib
import os
import shutil
from pathlib import Path

import torch

from .. import REPO_ROOT
from ..errors import DataError
from .tokenizer import CharTokenizer

BUNDLED = Path(__file__).resolve().parent  # files shipped with the package: found here first


def cache_dir(cfg) -> Path:
    d = cfg.cache_dir or os.environ.get("TRANSFORMEROP_DATA") or REPO_ROOT / "data"
    return Path(d).expanduser().resolve()


def locate(cfg) -> Path:
    """Where cfg.file is or would be: beside this module if the package ships it, else the cache."""
    bundled = BUNDLED / cfg.file
    return bundled if bundled.is_file() else cache_dir(cfg) / cfg.file


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _missing(cfg, path: Path, why: str) -> DataError:
    return DataError(f"{cfg.file} is not at {path} ({why}): put the file (sha256 {cfg.sha256}) there, or set "
                     f"data.cache_dir (or $TRANSFORMEROP_DATA) to a folder that holds it")


def _download(cfg, path: Path) -> None:
    """Fetch cfg.url into path, checked against cfg.sha256 before it is moved into place. Only the
    default cache folder is created; a data.cache_dir that does not exist is an error, not a mkdir."""
    folder = path.parent
    made = False
    if not folder.is_dir():
        if cfg.cache_dir or os.environ.get("TRANSFORMEROP_DATA"):
            raise DataError(f"data.cache_dir={folder} does not exist: create it, or point data.cache_dir at the "
                            f"folder that holds {cfg.file}")
        folder.mkdir(parents=True)
        made = True
    try:
        # torch.hub writes a temp file beside path, checks the hash prefix, then renames it
        torch.hub.download_url_to_file(cfg.url, str(path), hash_prefix=cfg.sha256, progress=False)
    except (OSError, RuntimeError, ValueError) as e:
        if made:
            shutil.rmtree(folder, ignore_errors=True)
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise _missing(cfg, path, f"download from {cfg.url} failed: {reason}") from None


def fetch(cfg) -> Path:
    """The verified file: located, downloaded if missing and a URL is known, checksum checked."""
    path = locate(cfg)
    if not path.exists():
        if not cfg.url:
            raise _missing(cfg, path, "no data.url to download it from")
        _download(cfg, path)
    digest = _sha256(path)
    if digest != cfg.sha256:
        raise DataError(f"{path} is corrupt: sha256 {digest}, expected {cfg.sha256} (data.sha256). Delete it "
                        f"to download it again, or replace it with the canonical file")
    return path


class ShakespeareData:
    """Whole corpus resident on the device; batches are random windows sampled there."""

    kind = "text"

    def __init__(self, cfg, block_size: int, device):
        text = fetch(cfg).read_text(encoding="utf-8")
        self.tokenizer = CharTokenizer(text)
        ids = self.tokenizer.encode_tensor(text)
        n = int(cfg.train_frac * len(ids))
        if min(n, len(ids) - n) <= block_size + 1:
            raise DataError(f"{cfg.file}: a split of {min(n, len(ids) - n)} characters is too short for "
                            f"model.block_size={block_size} (use a longer text or a smaller block_size)")
        self.splits = {"train": ids[:n].to(device), "val": ids[n:].to(device)}
        self.block_size = block_size
        self.device = device
        self._offsets = torch.arange(block_size + 1, device=device)

    @staticmethod
    def check(cfg) -> None:
        """Before any run dir: the file is there (or downloadable) and intact."""
        fetch(cfg)

    def batch(self, split: str, batch_size: int, generator=None):
        data = self.splits[split]
        starts = torch.randint(len(data) - self.block_size - 1, (batch_size, 1), device=self.device,
                               generator=generator)
        window = data[starts + self._offsets]  # (B, T+1) gathered on the device
        return window[:, :-1], window[:, 1:]

    def eval_batches(self, split: str, batch_size: int):
        """Every character of the split after the first scored exactly once: non-overlapping
        windows of block_size, then one window ending at the split's end whose already-scored
        targets are masked (-1), so a loss summed over targets covers the whole split."""
        data = self.splits[split]
        T = self.block_size
        n = (len(data) - 1) // T
        x = data[: n * T].view(n, T)
        y = data[1: n * T + 1].view(n, T)
        rest = len(data) - 1 - n * T
        if rest:
            tail_y = data[len(data) - T:].clone()
            tail_y[: T - rest] = -1
            x = torch.cat([x, data[len(data) - 1 - T: len(data) - 1][None]])
            y = torch.cat([y, tail_y[None]])
        for i in range(0, len(x), batch_size):
            yield x[i:i + batch_size], y[i:i + batch_size]
