"""Shared helpers: real Hydra composition of the project's config, and a CLI runner."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from transformerop.config import register

ROOT = Path(__file__).resolve().parent.parent

register()
torch.set_num_threads(min(2, os.cpu_count() or 1))


def make_cfg(*overrides):
    """The config `python run.py OVERRIDES...` would see (minus the hydra node)."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def run_cli(*args, cwd=ROOT, timeout=600, env=None):
    """Run `python run.py ARGS` as a user would; returns the CompletedProcess."""
    e = {**os.environ, "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1", **(env or {})}
    e.pop("WANDB_MODE", None)
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=e)


def refused_before_any_work(tmp_path, *overrides) -> str:
    """`python run.py OVERRIDES` must fail in one line (no traceback) before a run dir exists:
    returns its stderr for the caller's checks of what the line names."""
    run_dir = tmp_path / "run"
    r = run_cli(*overrides, "logger=none", f"hydra.run.dir={run_dir}")
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not run_dir.exists()
    return r.stderr


def small_graphed_trainer(tmp_path, name: str, *overrides):
    """A two-layer GPT on the shipped sample play, bf16, dropout 0.2, its step CUDA-graphed, seeded:
    the GPU tests' trainer for comparing a train lever on and off."""
    from transformerop.data import build_data
    from transformerop.model import build_model
    from transformerop.train import Trainer
    cfg = make_cfg(*SAMPLE, "model.n_layer=2", "model.n_head=4", "model.n_embd=128", "model.block_size=64",
                   "model.dropout=0.2", "model.bias=false", "train.batch_size=16", "train.dtype=bfloat16",
                   "train.cuda_graph=true", "train.progress=false", "train.checkpoint=false", *overrides)
    torch.manual_seed(0)
    dev = torch.device("cuda")
    data = build_data(cfg, dev)
    return Trainer(cfg, build_model(cfg, data.tokenizer.vocab_size), data, dev, tmp_path / name)


def lever_kernels_and_losses(tmp_path, lever: str, *overrides) -> tuple[dict, dict, dict]:
    """small_graphed_trainer with `lever` false, then true (both with `overrides`): each run's
    trainer, kernels a step (5 profiled after 3 warm-up steps) and 60 losses after them."""
    from transformerop.measure.profiler import kernel_profile
    trainers, counts, losses = {}, {}, {}
    for on in (False, True):
        tr = trainers[on] = small_graphed_trainer(tmp_path, f"{on}.pt", *overrides, f"{lever}={str(on).lower()}")
        for s in range(3):
            tr.train_step(s)
        counts[on] = kernel_profile(lambda: [tr.train_step(3 + i) for i in range(5)], 5)["kernels"]
        losses[on] = torch.stack([tr.train_step(8 + i).clone() for i in range(60)]).float().cpu()
    return trainers, counts, losses


def interpreted(script: str, timeout: int = 900) -> dict:
    """Run `script` in a fresh Python under TRITON_INTERPRET=1 (Triton reads the variable when it
    is imported, so this process cannot switch) and return the `KEY value` lines it printed."""
    p = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "TRITON_INTERPRET": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    return dict(line.split(" ", 1) for line in p.stdout.splitlines() if " " in line)


def script_result(script: str, env: dict, *args, timeout: int = 900, folder=None) -> dict:
    """Run `script ARGS` in a fresh Python with `env` added (TRITON_INTERPRET=1 for the Triton
    interpreter: Triton reads it when imported) and return the JSON it printed after "RESULT ".
    A script that defines @triton.jit functions runs from a file in `folder` (Triton reads their
    source), with the project on its path."""
    command = [sys.executable, "-c", script]
    if folder is not None:
        path = Path(folder) / "script.py"
        path.write_text(script)
        command, env = [sys.executable, str(path)], {"PYTHONPATH": str(ROOT), **env}
    p = subprocess.run([*command, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **env})
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(next(s for s in p.stdout.splitlines() if s.startswith("RESULT "))[len("RESULT "):])


H200_SHARED_MEMORY = 232448  # bytes one program may use on sm_90 (the launch refuses more)


def compile_for_h200(kernel, sig: dict, const: dict, options: dict):
    """triton.compile for sm_90, no GPU needed: it catches what the interpreter lets through (a
    plain module global inside @triton.jit, a dot's operand shapes); the kernel must also fit the
    shared memory the H200 would give one program at launch. Every pointer argument is marked
    16-byte aligned, as the launch marks a tensor's: without it no load is wide enough for an
    async copy, nothing is software-pipelined and the shared memory comes out far too small.
    Returns the compiled kernel (its asm: the PTX and SASS to look into)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    aligned = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(kernel.arg_names) if sig[name].startswith("*")}
    compiled = triton.compile(ASTSource(kernel, sig, const, attrs=aligned), target=GPUTarget("cuda", 90, 32),
                              options=options)
    assert compiled.metadata.shared <= H200_SHARED_MEMORY, compiled.metadata.shared
    return compiled

FAST = ["train.max_iters=30", "train.eval_interval=15", "train.eval_iters=2", "train.progress=false"]


def results(job_dir) -> dict:
    return json.loads((Path(job_dir) / "results.json").read_text())


def offline_runs(job_dir) -> list:
    """The W&B offline run folders a job left in its dir."""
    return sorted((Path(job_dir) / "wandb").glob("offline-run-*"))


def shakespeare_available() -> bool:
    from transformerop.data.shakespeare import locate
    return locate(make_cfg("data=shakespeare").data).exists()


# The sample play the package ships: text data through the same loader, no download.
SAMPLE = ["data=shakespeare", "data.file=sample_play.txt", "data.url=null",
          "data.sha256=9a40396c5ca5a1c76160dd51e7f0cf3f443787c5d53dc627eca9ba85f8b41bfe"]


needs_shakespeare = pytest.mark.skipif(not shakespeare_available(),
                                       reason="Tiny Shakespeare not in the data cache (CI copies it from ../shared/data)")


@pytest.fixture(autouse=True)
def _no_triton_launch_fallback(request):
    """The GPU suite fails if any Triton kernel had to fall back from its direct launch to the JIT."""
    yield
    launch = sys.modules.get("kernels.triton_launch")
    if request.node.get_closest_marker("gpu") and launch is not None:
        assert launch.fallback_error is None, f"direct Triton launch fell back to the JIT: {launch.fallback_error}"
