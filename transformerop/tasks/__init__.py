"""Tasks: each module has `run(cfg) -> dict` (flat metrics) and may have `check(cfg, device)`."""
