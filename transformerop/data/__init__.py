"""Data sets: each exposes .tokenizer, .kind, .batch(split, B) on the device, .eval_batches()."""
from .addition import AdditionData
from .shakespeare import DataError, ShakespeareData
from .tokenizer import CharTokenizer

DATASETS = {"addition": AdditionData, "shakespeare": ShakespeareData}


def build_data(cfg, device):
    if cfg.data.name not in DATASETS:
        raise ValueError(f"data.name={cfg.data.name!r}: choose one of {sorted(DATASETS)}")
    return DATASETS[cfg.data.name](cfg.data, cfg.model.block_size, device)


__all__ = ["AdditionData", "ShakespeareData", "CharTokenizer", "DataError", "build_data", "DATASETS"]
