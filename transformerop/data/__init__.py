"""Data sets: each exposes .tokenizer, .kind, .batch(split, B) on the device, .eval_batches()."""
from ..errors import DataError
from .addition import AdditionData
from .shakespeare import ShakespeareData
from .tokenizer import CharTokenizer

DATASETS = {"addition": AdditionData, "shakespeare": ShakespeareData}


def check_data(cfg) -> None:
    """Before any work: the data set's file is there and intact (text), or nothing to check."""
    if cfg.data.name not in DATASETS:
        raise ValueError(f"data.name={cfg.data.name!r}: choose one of {sorted(DATASETS)}")
    check = getattr(DATASETS[cfg.data.name], "check", None)
    if check is not None:
        check(cfg.data)


def build_data(cfg, device):
    if cfg.data.name not in DATASETS:
        raise ValueError(f"data.name={cfg.data.name!r}: choose one of {sorted(DATASETS)}")
    return DATASETS[cfg.data.name](cfg.data, cfg.model.block_size, device)


__all__ = ["AdditionData", "ShakespeareData", "CharTokenizer", "DataError", "build_data", "check_data", "DATASETS"]
