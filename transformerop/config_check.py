"""The config checks that Hydra's typing does not make: each number within the range its schema
field declares beside its default (`num(default, gt=0)` in config.py), no key the schema does not
know, even one added with `+key=value` (Hydra's append syntax bypasses its own struct check), and
the few rules that tie two fields together. They run before a run dir or W&B run exists."""
from dataclasses import MISSING, fields, is_dataclass

from omegaconf import DictConfig, OmegaConf

from .config import Config
from .errors import ConfigError


def _range_error(path: str, value, rng, power_of_two: bool) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    tests = {">": lambda b: value > b, ">=": lambda b: value >= b, "<": lambda b: value < b, "<=": lambda b: value <= b}
    want = [(op, b) for op, b in zip(tests, rng) if b is not None]
    ok = all(tests[op](b) for op, b in want)
    if power_of_two:
        want.append(("a power of two", ""))
        ok = ok and isinstance(value, int) and value > 0 and not value & (value - 1)
    if ok:
        return None
    return f"{path}={value} is out of range: it must be " + " and ".join(f"{op} {b}".strip() for op, b in want)


def _walk(schema, node, path: str, errors: list) -> None:
    known = {f.name: f for f in fields(schema)}
    if isinstance(node, DictConfig):
        for key in node.keys():
            if key not in known:
                errors.append(f"{path}{key} is not a config field (a typo? `+` cannot add keys here): "
                              f"{path.rstrip('.') or 'the config'} has {', '.join(sorted(known))}")
    for name, f in known.items():
        value = OmegaConf.select(node, name, throw_on_missing=False) if isinstance(node, DictConfig) else None
        sub = f.type if is_dataclass(f.type) else (f.default_factory if f.default_factory is not MISSING
                                                   and is_dataclass(f.default_factory) else None)
        if sub is not None and isinstance(value, DictConfig):
            _walk(sub, value, f"{path}{name}.", errors)
        elif "range" in f.metadata and value is not None:
            msg = _range_error(f"{path}{name}", value, f.metadata["range"], f.metadata["power_of_two"])
            if msg:
                errors.append(msg)


def check(cfg) -> None:
    """Raise ConfigError for a key outside the schema or a number outside its declared range."""
    errors: list = []
    node = OmegaConf.masked_copy(cfg, [k for k in cfg.keys() if k != "hydra"]) if "hydra" in cfg else cfg
    _walk(Config, node, "", errors)
    t = cfg.train
    if t.min_lr > t.lr:
        errors.append(f"train.min_lr={t.min_lr} is above train.lr={t.lr}: the cosine decays from lr to min_lr")
    if errors:
        raise ConfigError(errors[0] + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))
