"""Correct first: float64 references and the checks a bench target passes before it is timed.
A failed check raises Mismatch -- the job fails and nothing is timed or logged as a timing.

The references never call an attention backend's `attend`: the float64 model copy has every
block's attend replaced by `reference_attend`, so a wrong kernel cannot agree with itself."""
import copy
import math

import torch

from ..runtime import autocast


class Mismatch(AssertionError):
    """A target's result disagrees with its float64 reference."""


# The one tolerance table: max relative error against float64 (rel_err), by how the checked
# code's matmuls round; gradients are compared by norm per parameter tensor (norm_rel_err), since
# one gradient sums rounding from every token. An attention backend may declare its own
# (CausalSelfAttention.tolerance); validate, bench, the gradient gate and decode parity read these.
TOLERANCE = {"ieee": 1e-4, "tf32": 5e-3, "bf16": 5e-2}
GRAD_TOLERANCE = {"ieee": 1e-5, "tf32": 5e-3, "bf16": 5e-2}


def check_precision(dtype_name: str, device) -> str:
    """The rounding a check of torch code assumes: fp32 on CUDA may run matmuls in TF32."""
    if dtype_name == "bfloat16":
        return "bf16"
    return "tf32" if torch.device(device).type == "cuda" else "ieee"


def tolerance(dtype_name: str, device) -> float:
    return TOLERANCE[check_precision(dtype_name, device)]


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    """max |a - ref| / max |ref|: one number per tensor, scale-free."""
    return ((a.double() - ref.double()).abs().max() / ref.double().abs().max().clamp_min(1e-12)).item()


def expect_close(name: str, a: torch.Tensor, ref: torch.Tensor, tol: float) -> float:
    if a.shape != ref.shape:
        raise Mismatch(f"{name}: shape {tuple(a.shape)} != reference {tuple(ref.shape)}")
    if not torch.isfinite(a).all():
        raise Mismatch(f"{name}: non-finite values in the result")
    err = rel_err(a, ref)
    if not err <= tol:
        raise Mismatch(f"{name}: max relative error {err:.3g} vs float64 reference exceeds {tol:g}")
    return err


def reference_attend(q, k, v, mask=None):
    """float64 softmax(q k^T / sqrt(D) + mask) v; mask None = causal aligned bottom-right."""
    q, k, v = q.double(), k.double(), v.double()
    t_q, t_k = q.size(-2), k.size(-2)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is None:
        mask = torch.ones(t_q, t_k, dtype=torch.bool, device=q.device).tril(diagonal=t_k - t_q)
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v


def float64_model(model):
    """A float64 eval-mode copy whose attention runs reference_attend, not the backend, and
    whose residual adds, LayerNorms, MLPs, embeddings and head are PyTorch's, not model.fused_norm's,
    model.fused_mlp's, model.cublaslt_mlp's, model.dense_embedding_grad's or model.fused_head's."""
    ref = copy.deepcopy(model).double().eval()
    if getattr(ref, "fused_norm", False):
        ref.fused_norm = False
    if getattr(ref, "dense_embedding_grad", False):
        ref.dense_embedding_grad = False
    if getattr(ref, "fused_head", False):
        ref.fused_head = False
    for block in getattr(ref, "blocks", []):
        block.mlp.fused = block.mlp.cublaslt = False
        if hasattr(block.attn, "attend"):
            block.attn.attend = reference_attend  # instance attribute shadows the backend's method
    return ref


REFERENCE_ELEMENTS = 2 ** 27  # float64 scores held at once by the reference (1 GiB): it runs in batch chunks


def _reference_by_batch(q, k, v, dout):
    """reference_attend over the whole batch (and, with dout, its q/k/v gradients), a few batch
    rows at a time: rows never mix, so the chunks are exact, and a long sequence's (B, H, T, T)
    float64 scores never exist at once."""
    B, H, T = q.shape[0], q.shape[1], k.shape[2]
    step = max(1, REFERENCE_ELEMENTS // (H * q.shape[2] * T))
    outs, grads = [], []
    for b in range(0, B, step):
        chunk = [t[b:b + step].detach().double().requires_grad_(dout is not None) for t in (q, k, v)]
        with torch.set_grad_enabled(dout is not None):
            ref = reference_attend(*chunk)
        if dout is not None:
            grads.append(torch.autograd.grad(ref, chunk, dout[b:b + step].double()))
        outs.append(ref.detach())
    return torch.cat(outs), [torch.cat(g) for g in zip(*grads)] if grads else []


def check_attend(attn, B: int, H: int, T: int, D: int, dtype, dtype_name: str, device,
                 backward: bool = False, name: str = "attention") -> dict:
    """The backend's attend on random q, k, v (and dout) against float64, forward (+ grads)."""
    was_training = attn.training
    attn.eval()  # no attention dropout in the check
    q, k, v = (torch.randn(B, H, T, D, device=device).to(dtype).requires_grad_(backward) for _ in range(3))
    tol = tolerance(dtype_name, device)
    with torch.set_grad_enabled(backward):
        out = attn.attend(q, k, v, None)
    dout = torch.randn_like(out) if backward else None
    ref, refs = _reference_by_batch(q, k, v, dout)
    errs = {f"{name}_fwd_err": expect_close(f"{name} forward", out, ref, tol)}
    if backward:
        grads = torch.autograd.grad(out, (q, k, v), dout)
        for label, g, r in zip("qkv", grads, refs):
            errs[f"{name}_d{label}_err"] = expect_close(f"{name} d{label}", g, r, 2 * tol)
    attn.train(was_training)
    return errs


def check_model_attention(model, B: int, T: int, dtype_name: str, device) -> dict:
    """check_attend at the model's own shapes (first block), when the backend has attend().
    Logits alone would not do: at init the attention branch is a small part of the residual
    stream, so a wrong kernel can move the logits by less than the bf16 tolerance."""
    blocks = getattr(model, "blocks", [])
    if not len(blocks) or not hasattr(blocks[0].attn, "attend"):
        return {}
    attn = blocks[0].attn
    dtype = torch.bfloat16 if dtype_name == "bfloat16" else torch.float32
    return check_attend(attn, B, attn.n_head, T, attn.head_dim, dtype, dtype_name, device, name="model_attention")


def check_logits(model, idx, dtype_name: str, device) -> dict:
    """Eval-mode logits (under the run's autocast) against the float64 copy."""
    ref = float64_model(model)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        with autocast(device, dtype_name):
            logits, _ = model(idx)
        ref_logits, _ = ref(idx)
    model.train(was_training)
    return {"logits_err": expect_close("forward logits", logits, ref_logits, tolerance(dtype_name, device))}


def grad_tolerance(dtype_name: str, device) -> float:
    """Max ||g - ref|| / ||ref|| per parameter tensor. A norm, not a max: a gradient's largest
    element can be a near-cancellation."""
    return GRAD_TOLERANCE[check_precision(dtype_name, device)]


def norm_rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    return ((a.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def check_train_step(trainer, data, dtype_name: str, device) -> dict:
    """The gradient gate, before any train step is timed: one micro-batch through the trainer's
    own forward_backward (dropout off: eval mode) against a float64 copy whose attention is the
    float64 formula. The loss and every parameter's gradient must agree within the dtype's
    tolerance; then one optimizer_step must move every parameter. Nothing here is captured: a
    graphed step records its graph later, in training mode."""
    model = trainer.raw_model
    ref = float64_model(model)
    gen = torch.Generator(device=trainer.device).manual_seed(0)
    x, y = data.batch("train", trainer.t.batch_size, gen)
    trainer.opt.zero_grad(set_to_none=True)
    was_training = model.training
    model.eval()
    try:
        loss = trainer.forward_backward(x, y)
    finally:
        model.train(was_training)
    if not torch.isfinite(loss).all():
        raise Mismatch(f"train_step: loss is {loss.item()}")
    _, ref_loss = ref(x, y)
    ref_loss.backward()
    tol = tolerance(dtype_name, device)
    errs = {"loss_err": expect_close("train_step loss", loss.reshape(1), ref_loss.detach().reshape(1), tol)}
    worst, worst_name = 0.0, None
    for (name, p), r in zip(model.named_parameters(), ref.parameters()):
        if p.grad is None:
            raise Mismatch(f"train_step: {name} got no gradient")
        if r.grad is None:
            continue
        if not torch.isfinite(p.grad).all():
            raise Mismatch(f"train_step gradient of {name}: non-finite values")
        err, gtol = norm_rel_err(p.grad, r.grad), grad_tolerance(dtype_name, device)
        if not err <= gtol:
            raise Mismatch(f"train_step gradient of {name}: relative error {err:.3g} (norm) vs float64 reference "
                           f"exceeds {gtol:g}")
        if err >= worst:
            worst, worst_name = err, name
    errs.update(grad_err=worst, grad_worst=worst_name)
    # the parameters AdamW steps: train.master_weights' fp32 masters in place of their bf16 copies
    stepped = list(model.parameters()) if trainer.masters is None else trainer.masters.substituted(model.parameters())
    before = [p.detach().clone() for p in stepped]
    trainer.optimizer_step()
    unchanged = [n for (n, _), p, b in zip(model.named_parameters(), stepped, before) if torch.equal(b, p.detach())]
    if unchanged:
        raise Mismatch(f"train_step: the optimizer step left {len(unchanged)} parameter tensors unchanged "
                       f"({', '.join(unchanged[:3])})")
    return {**errs, "params_changed": len(before)}
