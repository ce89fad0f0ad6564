"""TransformerOp: a config-driven pipeline for training, measuring and speeding up a small GPT."""
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
