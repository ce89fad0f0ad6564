"""TransformerOp entry point: compose the config, run the chosen task, record the results."""
import sys

from transformerop import cuda_early

cuda_early.start()  # the driver and the GPU's context start while the imports below run

import hydra  # noqa: E402

from transformerop import clock  # noqa: E402
from transformerop.config import register  # noqa: E402
from transformerop.jobs import compose_once, objective, run_job  # noqa: E402
from transformerop.tracking import SweepSummary  # noqa: E402

clock.imports_done()
cuda_early.warm()  # torch's CUDA state and the first cuBLAS and SDPA calls, while Hydra composes the config
register()
compose_once()  # Hydra would compose the config once more just to read hydra.mode


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg):
    return objective(run_job(cfg), cfg)  # a search's objective (search.objectives), else None


if __name__ == "__main__":
    main()
    sys.exit(1 if SweepSummary.failed else 0)
