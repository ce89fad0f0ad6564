"""task=validate: every attention backend's validation variants (model/attention: each class
declares its own, such as CUDA versions or softmax kernels) x dtype x (forward, backward)
against a float64 reference on fresh random inputs, at the seed shape, odd ones (head dim
128, sequences past block_size) and the configured model's own heads, within the backend's
tolerance for its precision; then every decode path against the reference path
(decode/parity.py) on a two-layer model of the configured width and heads. Outputs are poisoned
with NaN before each run so an unwritten element fails. Prints a table; the job fails if any row
fails."""
import logging

import torch
from omegaconf import OmegaConf

from .. import tracking
from ..errors import refusal
from ..measure.reference import reference_attend, rel_err
from ..model import BACKENDS, build_model, get_backend
from ..model import REFERENCE as REF_BACKEND
from ..runtime import pick_device

log = logging.getLogger(__name__)

# (B, H, T, D): the seed shape, then T = 1, 7, 64, 255, 256 with odd batches, head dims 32 and 64,
# and head dim 128 past the seed's block_size (T 300, 512).
SHAPES = [(64, 6, 256, 64), (3, 6, 1, 64), (5, 4, 7, 32), (3, 6, 64, 64), (5, 4, 255, 32), (3, 6, 256, 64),
          (1, 2, 255, 64), (2, 4, 300, 128), (2, 2, 512, 128)]
CPU_SHAPES = [(8, 6, 256, 64)] + SHAPES[1:]  # the seed batch of 64 is minutes of float64 on a CPU


def variants():
    """(label, attention config) for every backend's declared validation variants."""
    for name in BACKENDS:
        yield from get_backend(name).variants(name)


def _row_cfg(cfg, acfg: dict, dtype: str, H: int, D: int):
    return OmegaConf.merge(cfg, {"attention": acfg, "train": {"dtype": dtype},
                                 "model": {"name": "gpt", "n_head": H, "n_embd": H * D, "dropout": 0.0}})


def _poison_allocator(device, numel: int) -> None:
    """Fill soon-to-be-reused allocator blocks with NaN: outputs a kernel forgets to write stay NaN."""
    if device.type == "cuda":
        torch.full((numel * 4,), float("nan"), device=device)  # freed at once, NaN stays in the block


def _check_one(module, B, H, T, D, dtype, device, gen):
    """Max relative errors (forward, backward) of module.attend vs float64 autograd."""
    q, k, v = (torch.randn(B, H, T, D, device=device, generator=gen, dtype=torch.float32).to(dtype)
               .requires_grad_() for _ in range(3))
    _poison_allocator(device, B * H * T * D)
    out = module.attend(q, k, v, None)
    g = torch.randn(out.shape, device=device, generator=gen).to(dtype)
    _poison_allocator(device, 3 * B * H * T * D)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), g)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = reference_attend(q64, k64, v64)
    rq, rk, rv = torch.autograd.grad(ref, (q64, k64, v64), g.double())
    fwd = rel_err(out.detach(), ref.detach()) if torch.isfinite(out).all() else float("nan")
    # One scale for all three gradients: dq and dk are exactly 0 at T = 1, so each alone has none.
    got = torch.cat([t.reshape(-1) for t in (dq, dk, dv)])
    want = torch.cat([t.reshape(-1) for t in (rq, rk, rv)])
    bwd = rel_err(got, want) if torch.isfinite(got).all() else float("nan")
    return fwd, bwd


def _check_module(module, B, H, T, D, dtype, device, gen):
    """naive_loop has no attend(): its whole forward/backward against the float64 formula built
    from its own weights (each head's q, k, v projections, reference_attend, the out-projection)."""
    module = module.to(device=device, dtype=dtype)
    x = torch.randn(B, T, H * D, device=device, generator=gen).to(dtype).requires_grad_()
    out = module(x)
    g = torch.randn(out.shape, device=device, generator=gen).to(dtype)
    (dx,) = torch.autograd.grad(out, (x,), g)
    x64 = x.detach().double().requires_grad_()
    w = lambda lin: lin.weight.detach().double()  # noqa: E731
    heads = [reference_attend(x64 @ w(h.query).T, x64 @ w(h.key).T, x64 @ w(h.value).T) for h in module.heads]
    proj = module.c_proj
    r = torch.cat(heads, dim=-1) @ w(proj).T + (proj.bias.detach().double() if proj.bias is not None else 0)
    (rx,) = torch.autograd.grad(r, (x64,), g.double())
    return rel_err(out.detach(), r.detach()), rel_err(dx, rx)


def run(cfg) -> dict:
    tracker = tracking.current()
    device = pick_device(cfg.device)
    shapes = SHAPES if device.type == "cuda" else CPU_SHAPES
    # the configured model's own heads too (model.n_embd / n_head at its block_size): a shape the
    # user asked about is validated, or its refusal is a row of its own
    m = cfg.model
    model_shape = (2, m.n_head, m.block_size, m.n_embd // m.n_head) if m.name == "gpt" else None
    log.info(f"attention shapes (B, H, T, D): {shapes}" + (f" and the model's {model_shape}" if model_shape else ""))
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    rows = []
    for label, acfg in variants():
        for dtype_name in ("float32", "bfloat16"):
            backend = get_backend(acfg["name"])
            row_cfg = _row_cfg(cfg, acfg, dtype_name, 6, 64)
            reason = refusal(backend.check, row_cfg, device)
            if reason:
                rows.append([label, dtype_name, "-", "-", "-", "-", f"skipped: {reason}"])
                continue
            own = model_shape and refusal(backend.check,
                                          _row_cfg(cfg, acfg, dtype_name, model_shape[1], model_shape[3]), device)
            dtype = torch.float32 if dtype_name == "float32" else torch.bfloat16
            tol = backend.tolerance(backend.precision(dtype_name, row_cfg.attention, device))
            errs = []  # (fwd, bwd, shape) per shape
            for (B, H, T, D) in shapes + ([model_shape] if model_shape and not own else []):
                mcfg = _row_cfg(cfg, acfg, dtype_name, H, D)
                module = backend(mcfg.model, mcfg.attention).to(device)
                check = _check_one if hasattr(module, "attend") else _check_module
                errs.append((*check(module, B, H, T, D, dtype, device, gen), (B, H, T, D)))
            worst = max(errs, key=lambda e: _badness(max(e[0], e[1]) if e[0] == e[0] and e[1] == e[1] else None))
            worst_f, worst_b = max(_badness(e[0]) for e in errs), max(_badness(e[1]) for e in errs)
            worst_shape = worst[2]
            ok = worst_f <= tol and worst_b <= tol
            rows.append([label, dtype_name, f"{worst_f:.2e}", f"{worst_b:.2e}", f"{tol:g}", str(worst_shape),
                         "pass" if ok else "FAIL"])
            log.info(f"{label} {dtype_name}: {rows[-1][-1]} (fwd {worst_f:.2e}, bwd {worst_b:.2e}, tolerance {tol:g})")
            if own:
                rows.append([label, dtype_name, "-", "-", "-", str(model_shape), f"skipped: {own}"])
    rows += _decode_rows(cfg, device)
    n_fail = sum(r[-1] == "FAIL" for r in rows)
    cols = ["backend", "dtype", "fwd max rel err", "bwd max rel err", "tolerance", "worst shape", "result"]
    _print_table(cols, rows)
    tracker.table("validation", cols, rows)
    n_pass = sum(r[-1] == "pass" for r in rows)  # attention rows, then decode paths
    n_skip = sum(r[-1].startswith("skipped") for r in rows)
    if n_fail:
        raise AssertionError(f"{n_fail} backend/dtype rows failed validation (see the table)")
    return {"validated_pass": n_pass, "validated_fail": n_fail, "validated_skipped": n_skip}


def _decode_rows(cfg, device) -> list:
    """Every decode path against the reference path on a random GPT, past block_size
    (decode/parity.py): greedy fp32 (same tokens but for float64 near-ties, logits within
    tolerance) and, on a GPU, bf16 (logits within bf16's tolerance while the tokens agree)."""
    import copy

    from ..decode import PATHS, REFERENCE, Decoder, check
    from ..decode.parity import parity
    from ..measure.reference import Mismatch
    gpt = cfg.model.name == "gpt"  # the configured GPT's width and heads, two layers
    C, H = (cfg.model.n_embd, cfg.model.n_head) if gpt else (64, 4)
    mcfg = OmegaConf.merge(cfg, {"model": {"name": "gpt", "n_layer": 2, "n_head": H, "n_embd": C,
                                           "block_size": 32, "dropout": 0.0}, "attention": {"name": REF_BACKEND},
                                 "train": {"dtype": "float32"}})
    torch.manual_seed(cfg.seed)
    model = build_model(mcfg, 65).to(device).eval()
    models = {"float32": model}
    if torch.device(device).type == "cuda":
        models["bfloat16"] = copy.deepcopy(model).to(torch.bfloat16)
    prompt = torch.randint(65, (3, 5), device=device)
    rows = []
    for path in (p for p in PATHS if p != REFERENCE):
        for dtype, m in models.items():
            pcfg = OmegaConf.merge(mcfg, {"decode": {"name": path}, "train": {"dtype": dtype}})
            reason = refusal(check, pcfg, device)
            if reason:
                rows.append([f"decode={path}", dtype, "-", "-", "-", "-", f"skipped: {reason}"])
                continue
            dec = Decoder(m, path, 3, 5 + 70, temperature=0, dcfg=pcfg.decode)
            try:
                p = parity(m, dec, prompt, 70, dtype)
                same = ", same tokens" if dtype == "float32" else f", {p['parity_tokens_agree']}/70 tokens agree"
                err, result, tol = f"{p['parity_rel_logit_diff']:.2e}", "pass", f"{p['parity_tolerance']:g}{same}"
            except Mismatch as e:
                err, result, tol = str(e)[:60], "FAIL", "-"
            rows.append([f"decode={path}", dtype, err, "-", tol, f"(3, 5+70, W=32, C={C}, H={H})", result])
    return rows


def _badness(err) -> float:
    """NaN (an unwritten or poisoned output) ranks worse than any finite error."""
    return float("inf") if err is None or err != err else err


def _print_table(cols, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(cols, *rows)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths))
    log.info(line(cols))
    log.info("  ".join("-" * w for w in widths))
    for r in rows:
        log.info(line(r))
