"""task=validate: every available attention backend (and CUDA version, and softmax kernel) x
dtype x (forward, backward) against a float64 reference on fresh random inputs, at the seed
shape and odd ones. Outputs are poisoned with NaN before each run so an unwritten element
fails. Prints a table; the job fails (non-zero exit) if any row fails."""
import logging
import torch
from omegaconf import OmegaConf

from .. import tracking
from ..measure.reference import reference_attend, rel_err
from ..model import BACKENDS, BackendUnavailable, build_model, get_backend
from ..runtime import pick_device

log = logging.getLogger(__name__)

# (B, H, T, D): the seed shape, then T = 1, 7, 64, 255, 256 with odd batches, head dims 32 and 64.
SHAPES = [(64, 6, 256, 64), (3, 6, 1, 64), (5, 4, 7, 32), (3, 6, 64, 64), (5, 4, 255, 32), (3, 6, 256, 64),
          (1, 2, 255, 64)]
CPU_SHAPES = [(8, 6, 256, 64)] + SHAPES[1:]  # the seed batch of 64 is minutes of float64 on a CPU
TOL = {"float32": 1e-4, "tf32": 5e-3, "bfloat16": 3e-2}


def variants(cfg):
    """(label, attention config) for every backend, each CUDA version and softmax kernel."""
    for name in BACKENDS:
        if name == "cuda":
            for v in range(1, 6):
                yield f"cuda v{v}", {"name": "cuda", "version": v}
        elif name == "naive":
            for sm in ("torch", "cuda_block", "cuda_warp", "cuda_adaptive"):
                yield f"naive softmax={sm}", {"name": "naive", "softmax": sm}
        else:
            yield name, {"name": name}


def _row_cfg(cfg, acfg: dict, dtype: str, H: int, D: int):
    c = OmegaConf.merge(cfg, {"attention": acfg, "train": {"dtype": dtype}, "decode": {"name": "kv_cache"},
                              "model": {"name": "gpt", "n_head": H, "n_embd": H * D, "dropout": 0.0}})
    return c


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
    """naive_loop has no attend(): compare its whole forward/backward with a float64 copy."""
    import copy
    module = module.to(device=device, dtype=dtype)
    ref = copy.deepcopy(module).double()
    x = torch.randn(B, T, H * D, device=device, generator=gen).to(dtype).requires_grad_()
    out = module(x)
    g = torch.randn(out.shape, device=device, generator=gen).to(dtype)
    (dx,) = torch.autograd.grad(out, (x,), g)
    x64 = x.detach().double().requires_grad_()
    r = ref(x64)
    (rx,) = torch.autograd.grad(r, (x64,), g.double())
    return rel_err(out.detach(), r.detach()), rel_err(dx, rx)


def run(cfg) -> dict:
    tracker = tracking.current()
    device = pick_device(cfg.device)
    shapes = SHAPES if device.type == "cuda" else CPU_SHAPES
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    rows = []
    for label, acfg in variants(cfg):
        for dtype_name in ("float32", "bfloat16"):
            reason, backend = None, get_backend(acfg["name"])
            try:
                backend.check(_row_cfg(cfg, acfg, dtype_name, 6, 64), device)
            except (BackendUnavailable, ValueError) as e:
                reason = str(e).splitlines()[0]
            if reason is None and acfg["name"] == "triton" and device.type != "cuda":
                reason = "triton on CPU runs only under TRITON_INTERPRET=1 (tests do that on small shapes)"
            if reason:
                rows.append([label, dtype_name, "-", "-", "-", "-", f"skipped: {reason}"])
                continue
            dtype = torch.float32 if dtype_name == "float32" else torch.bfloat16
            tol_name = "tf32" if dtype_name == "float32" and device.type == "cuda" and acfg["name"] == "triton" \
                else dtype_name
            tol = TOL[tol_name]
            errs = []  # (fwd, bwd, shape) per shape
            for (B, H, T, D) in shapes:
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
    """Every decode path against recompute on a random GPT, greedy fp32, past block_size: the
    tokens must be identical and the logits equal within 1e-4 (relative)."""
    from ..decode import PATHS, Decoder, check
    mcfg = OmegaConf.merge(cfg, {"model": {"name": "gpt", "n_layer": 2, "n_head": 4, "n_embd": 64,
                                           "block_size": 32, "dropout": 0.0}, "attention": {"name": "sdpa"},
                                 "train": {"dtype": "float32"}})
    torch.manual_seed(cfg.seed)
    model = build_model(mcfg, 65).to(device).eval()
    prompt = torch.randint(65, (3, 5), device=device)
    runs, rows = {}, []
    for path in PATHS:
        try:
            check(OmegaConf.merge(mcfg, {"decode": {"name": path}}), device)
        except (BackendUnavailable, ValueError) as e:
            rows.append([f"decode={path}", "float32", "-", "-", "-", "-", f"skipped: {str(e).splitlines()[0]}"])
            continue
        logits = []
        out = Decoder(model, path, 3, 5 + 70, temperature=0)(prompt, on_logits=lambda i, x: logits.append(x.clone()))
        runs[path] = (out.clone(), torch.stack(logits))
        if path == "recompute":
            continue
        (ref_tok, ref_log), (tok, log) = runs["recompute"], runs[path]
        err = rel_err(log, ref_log)
        ok = torch.equal(tok, ref_tok) and err <= 1e-4
        rows.append([f"decode={path}", "float32", f"{err:.2e}", "-", "1e-4, same tokens", "(3, 5+70, W=32)",
                     "pass" if ok else "FAIL"])
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
