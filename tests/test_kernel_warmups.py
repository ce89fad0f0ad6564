"""A model's kernel warm-ups (GPT.kernel_warmups, run by transformerop/cuda_early.py before the
job's first step) launch every Triton kernel form its train step and evaluation launch: the same
kernel, constexprs, pointer dtypes and alignments, and int classes Triton specializes on. A form
the warm-ups miss would compile on the start-up clock after all.

Each launch of the fused norm's, MLP's and head's kernels (and attention=triton's) is recorded (the real kernel still runs) while
the warm-ups run, then while the model takes a training forward and backward and an evaluation
forward. CPU: under TRITON_INTERPRET=1, fp32. GPU: bf16, and Triton's own compile hook counts
compiles after the warm-ups (none may happen). A warm-up list with one call left out must be
caught (planted fault)."""
import pytest
import torch

SCRIPT = r'''
import json, sys
import torch
import triton
from hydra import compose, initialize_config_dir
from kernels import triton_attention, triton_head, triton_mlp, triton_norm, triton_tn
from transformerop import REPO_ROOT
from transformerop.config import register
from transformerop.model import build_model, kernel_warmups
from transformerop.runtime import autocast

dev, dtype, bias, attention = torch.device(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
register()
with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
    cfg = compose("config", overrides=["model=gpt", "model.n_layer=2", "model.n_head=2", "model.n_embd=32",
                                       "model.block_size=16", "model.fused_norm=true", "model.fused_mlp=true", "model.fused_head=true",
                                       "model.dense_embedding_grad=true", f"model.bias={bias}", f"train.dtype={dtype}", f"attention={attention}",
                                       "attention.cpp_launch=false", "train.batch_size=2", "train.eval_batch_size=2"])
seen = set()


def form(kernel, args, kwargs):
    """What Triton specializes a launch on: tensors' dtype and 16-byte alignment, ints' class
    (divisible by 16, equal to 1) unless do_not_specialize, constexprs' values."""
    skip = set(getattr(kernel, "do_not_specialize", None) or getattr(kernel, "kwargs", {}).get("do_not_specialize") or [])
    parts = []
    for name, a in zip(kernel.arg_names, args):
        if torch.is_tensor(a):
            parts.append((name, str(a.dtype), a.data_ptr() % 16 == 0))
        elif isinstance(a, int) and not isinstance(a, bool) and name not in skip:
            parts.append((name, a % 16 == 0, a == 1))
        else:
            parts.append((name, type(a).__name__))
    return str((kernel.arg_names[0], parts, sorted((k, str(v)) for k, v in kwargs.items())))


class Recorded:
    """kernel[grid](...) as usual, its form added to `seen` first."""

    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            seen.add(form(self.kernel, args, kwargs))
            return self.kernel[grid](*args, **kwargs)
        return launch


for module, name in ((triton_norm, "_add_norm_fwd"), (triton_norm, "_add_norm_bwd"), (triton_norm, "_column_sums"),
                     (triton_mlp, "_fc_gelu_kernel"), (triton_head, "_head_fwd"), (triton_head, "_head_bwd"),
                     (triton_attention, "_fwd_kernel"), (triton_attention, "_bwd_kernel"), (triton_tn, "_tn_partials")):
    setattr(module, name, Recorded(getattr(module, name)))

compiles = []
if dev.type == "cuda":
    triton.knobs.runtime.jit_post_compile_hook = lambda *a, **k: compiles.append(1)
per_call = []
for call in kernel_warmups(cfg, dev):
    seen.clear()
    call()
    per_call.append(set(seen))
warm_compiles = len(compiles)

seen.clear()
torch.manual_seed(0)
model = build_model(cfg, 11, dev).train()
idx, tgt = torch.randint(0, 11, (2, 16), device=dev), torch.randint(0, 11, (2, 16), device=dev)
with autocast(dev, dtype):
    loss = model(idx, tgt)[1]
loss.backward()
model.eval()
with torch.no_grad(), autocast(dev, dtype):
    model(idx, tgt)
warmed = set().union(*per_call)
planted = set().union(*per_call[:-1])
print("RESULT " + json.dumps({"calls": len(per_call), "model_forms": len(seen), "missing": sorted(seen - warmed),
                              "missing_planted": sorted(seen - planted), "warm_compiles": warm_compiles,
                              "compiles_after": len(compiles) - warm_compiles}))
'''


def _check(out, attention="sdpa", cuda=False):
    # norm: 2 forward forms x (training, evaluation) + 3 backward forms; MLP: 2; head: forward, backward;
    # attention=triton: its training forward, its backward (a call of its own), its evaluation's forward (the
    # last); on CUDA wte's one-hot gradient (kernels/triton_tn.py; elsewhere torch's matmul)
    triton = attention == "triton"
    assert out["calls"] == 11 + 3 * triton + cuda
    assert out["model_forms"] >= 9 + 3 * triton and out["missing"] == [], out["missing"]
    assert out["missing_planted"], "a warm-up list missing a call went unnoticed"


@pytest.mark.parametrize("bias,attention", [("true", "sdpa"), ("false", "sdpa"), ("false", "triton")])
def test_warmups_launch_every_form_the_model_does_under_the_interpreter(bias, attention):
    from conftest import script_result
    _check(script_result(SCRIPT, {"TRITON_INTERPRET": "1"}, "cpu", "float32", bias, attention), attention)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_warmups_leave_nothing_to_compile_on_a_gpu():
    from conftest import script_result
    out = script_result(SCRIPT, {}, "cuda", "bfloat16", "false", "sdpa")
    _check(out, cuda=True)
    assert out["compiles_after"] == 0, out
    # one compile a call, and two more: the first norm backward also launches the column sums of its dw
    # partials, the head's backward its g^T x (kernels/triton_tn.py)
    assert out["warm_compiles"] == out["calls"] + 2 == 14, out
