"""Tasks: each module has `run(cfg) -> dict` (flat metrics) and may have `check(cfg, device)`
(raise before any work) and `needs_data(cfg)`. One task = one module + one entry here."""
import importlib

TASKS = ("train", "generate", "bench", "profile", "validate", "calibrate", "predict", "report")


def task_module(name: str):
    if name not in TASKS:
        raise ValueError(f"task.name={name!r}: choose one of {list(TASKS)}")
    return importlib.import_module(f"transformerop.tasks.{name}")
