"""W&B run names a person can read in a dashboard: the overrides that vary across the sweep,
with short keys (`attention=<name> dtype=bfloat16`), not `<stamp>/0`."""
import os
import re
from pathlib import Path

from hydra.types import RunMode
from omegaconf import OmegaConf

NAME_ENV = "TRANSFORMEROP_RUN_NAME"  # an isolating sweep names its child processes' runs


def short(key: str) -> str:
    return re.split(r"[./]", key.lstrip("+~"))[-1]


def swept_keys(sweep_dir: Path, sweeper_params) -> set:
    """Keys a multirun sweeps: its sweeper params, and CLI overrides with sweep syntax (a,b /
    range() / choice()), read from the multirun.yaml Hydra writes at the sweep's root."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    items = [f"{k}={v}" for k, v in (sweeper_params or {}).items()]
    try:
        items += list(OmegaConf.load(sweep_dir / "multirun.yaml").hydra.overrides.task)
    except (OSError, AttributeError, ValueError):
        pass
    keys = set()
    for o in OverridesParser.create().parse_overrides(items):
        if o.is_sweep_override():
            keys.add(o.get_key_element())
    return keys


def run_name(overrides: list, hc, job_dir: Path) -> str:
    if os.environ.get(NAME_ENV):
        return os.environ[NAME_ENV]
    pairs = [o.split("=", 1) for o in overrides if "=" in o]
    if hc.mode == RunMode.MULTIRUN:
        keys = swept_keys(Path(hc.sweep.dir), OmegaConf.to_container(hc.sweeper.params) if hc.sweeper.get("params")
                          else {})
        pairs = [(k, v) for k, v in pairs if k.lstrip("+~") in keys]
    name = " ".join(f"{short(k)}={v}" for k, v in pairs)
    return name or job_dir.name
