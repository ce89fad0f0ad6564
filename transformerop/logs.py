"""Logging helpers: job output goes through Python logging (Hydra writes it to the console and
the job's run.log); messages go to stdout, warnings and errors to stderr, as a shell user expects."""
import logging
import sys


class BelowWarning(logging.Filter):
    """Lets through what is less severe than a warning (the stdout handler's filter)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.WARNING


def setup_cli(level=logging.INFO) -> None:
    """For command-line tools outside Hydra (python -m transformerop.report): same split, no file."""
    out = logging.StreamHandler(sys.stdout)
    out.addFilter(BelowWarning())
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(logging.WARNING)
    logging.basicConfig(level=level, format="%(message)s", handlers=[out, err], force=True)
