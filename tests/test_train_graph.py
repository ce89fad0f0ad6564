"""train.cuda_graph: the captured step trains like the eager one (GPU), and is refused cleanly on CPU."""
import pytest
import torch

from conftest import FAST, make_cfg, results, run_cli
from transformerop.data import build_data
from transformerop.model import build_model
from transformerop.train import Trainer


def test_cuda_graph_on_cpu_is_skipped_with_the_reason(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("checks the CPU refusal")
    run_dir = tmp_path / "run"
    p = run_cli("train.cuda_graph=true", *FAST, "logger=none", f"hydra.run.dir={run_dir}")
    assert p.returncode == 3 and p.stderr.strip() == "skipped: train.cuda_graph=true needs CUDA (it captures the " \
        "step in a CUDA graph)"
    assert not run_dir.exists()  # nothing ran, nothing is left behind
    sweep = tmp_path / "sweep"
    p = run_cli("-m", "train.cuda_graph=true", *FAST, "logger=none", f"hydra.sweep.dir={sweep}")
    assert p.returncode == 0 and results(sweep / "0")["status"] == "skipped"  # a sweep records it


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run `pytest -m gpu` on the device)")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_graphed_step_trains_like_eager(tmp_path, dtype):
    dev = torch.device("cuda")
    losses = {}
    for graphed in (False, True):
        cfg = make_cfg("train.progress=false", "train.max_iters=200", "train.eval_interval=200",
                       f"train.cuda_graph={graphed}", f"train.dtype={dtype}")
        torch.manual_seed(cfg.seed)
        data = build_data(cfg, dev)
        tr = Trainer(cfg, build_model(cfg, data.tokenizer.vocab_size), data, dev, tmp_path / f"{graphed}.pt")
        losses[graphed] = tr.fit()["val_loss"]
        assert (tr.graphed is not None) == graphed and (not graphed or tr.graphed.captured is not None)
    assert losses[True] < 1.0 and abs(losses[True] - losses[False]) < 0.1 * losses[False] + 0.02
