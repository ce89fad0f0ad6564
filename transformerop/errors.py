"""Errors a user can fix. Each prints as one line naming the field or path and the fix, with no
traceback (set TRANSFORMEROP_TRACEBACK=1 to see it); anything else is a bug and keeps its
traceback in results.json."""
import os


class UserError(Exception):
    """A problem in the input (config value, data file, checkpoint), not in the code."""


class ConfigError(UserError, ValueError):
    """A config that cannot work: reported before any run dir or W&B run exists."""


class DataError(UserError, RuntimeError):
    """A missing or corrupt data file."""


class CheckpointError(UserError, ValueError):
    """A checkpoint that cannot be used for this model."""


class BackendUnavailable(RuntimeError):
    """This backend cannot run here (no CUDA, no compiler, ...): the job is skipped, not failed."""


def show_traceback() -> bool:
    return os.environ.get("TRANSFORMEROP_TRACEBACK", "") not in ("", "0")


def refusal(check, *args) -> str | None:
    """Why check(*args) refuses (a backend's or a decode path's check: its error's first line), or None."""
    try:
        check(*args)
    except (BackendUnavailable, ValueError) as e:
        return str(e).splitlines()[0]
    return None
