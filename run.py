"""TransformerOp entry point: compose the config, run the chosen task, record the results."""
import sys

import hydra

from transformerop import clock
from transformerop.config import register
from transformerop.jobs import compose_once, objective, run_job
from transformerop.tracking import SweepSummary

clock.imports_done()
register()
compose_once()  # Hydra would compose the config once more just to read hydra.mode


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg):
    return objective(run_job(cfg), cfg)  # a search's objective (search.objectives), else None


if __name__ == "__main__":
    main()
    sys.exit(1 if SweepSummary.failed else 0)
