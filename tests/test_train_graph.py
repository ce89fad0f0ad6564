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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run `pytest -m gpu` on the device)")
@pytest.mark.parametrize("attention", ["sdpa", "triton"])
def test_graphed_step_keeps_dropout_and_the_eager_kernels(tmp_path, attention):
    """Graphed = eager: captured in training mode after warm-up, the replayed step runs the eager
    step's kernels (dropout's included; the graph adds only the batch copies into its static
    buffers and the lr fills, <= 6) and its training losses follow the eager ones."""
    from conftest import SAMPLE

    from transformerop.measure.profiler import kernel_profile
    dev = torch.device("cuda")
    counts, losses = {}, {}
    for graphed in (False, True):
        cfg = make_cfg(*SAMPLE, "model.n_layer=2", "model.n_head=4", "model.n_embd=128", "model.block_size=64",
                       "model.dropout=0.2", "train.batch_size=16", "train.dtype=bfloat16", f"attention={attention}",
                       f"train.cuda_graph={graphed}", "train.progress=false", "train.checkpoint=false")
        torch.manual_seed(0)
        data = build_data(cfg, dev)
        tr = Trainer(cfg, build_model(cfg, data.tokenizer.vocab_size), data, dev, tmp_path / f"{graphed}.pt")
        tr.model.train()
        for s in range(3):  # warm-up; the graphed trainer captures in its first step
            tr.train_step(s)
        assert tr.model.training
        counts[graphed] = kernel_profile(lambda: [tr.train_step(3 + i) for i in range(5)], 5)["kernels"]
        losses[graphed] = torch.stack([tr.train_step(8 + i).clone() for i in range(60)]).float().cpu()
    assert abs(counts[True] - counts[False]) <= 6, counts
    assert abs(losses[True][-20:].mean() - losses[False][-20:].mean()) < 0.1, (losses[True][-20:], losses[False][-20:])
