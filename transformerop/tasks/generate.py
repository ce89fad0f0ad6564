"""task=generate: a model (loaded from generate.checkpoint, or trained in this job), a correctness
gate against `recompute`, then the whole generation of generate.tokens tokens for
generate.batch_size prompts timed along decode.name.

bf16 (train.dtype=bfloat16) decodes with the weights cast to bf16 (`model.to(torch.bfloat16)`),
not under autocast: the KV caches are bf16 too. Graph capture and compilation happen once, when
the Decoder is built, outside the timed region; they are reported as capture_s / compile_s."""
import logging
import time
from pathlib import Path

import torch

from .. import checkpoint, tracking
from ..data.tokenizer import CharTokenizer
from ..decode import Decoder
from ..decode import check as check_decode
from ..measure.timing import measure
from ..model import build_model
from ..runtime import pick_device, seed_everything, sync, torch_dtype
from ..measure.profiler import profile_beside
from .train import check as check_train
from .train import train_model

log = logging.getLogger(__name__)

GATE_TOKENS = 32  # tokens compared with recompute before timing
GATE_TOL = {"float32": 1e-3, "bfloat16": 5e-2}  # max |logit diff| / max |logit| on a shared prefix


def check(cfg, device):
    check_decode(cfg, device)
    g = cfg.generate
    for key in ("tokens", "batch_size", "repeats"):
        if getattr(g, key) < 1:
            raise ValueError(f"generate.{key}={getattr(g, key)} must be >= 1")
    if g.temperature < 0:
        raise ValueError(f"generate.temperature={g.temperature} must be >= 0 (0 = greedy)")
    if g.top_k is not None and g.top_k < 1:
        raise ValueError(f"generate.top_k={g.top_k} must be >= 1 or null")
    if not g.prompt:
        raise ValueError("generate.prompt is empty: give at least one character to condition on")
    if g.checkpoint:
        if not Path(g.checkpoint).expanduser().is_file():
            raise ValueError(f"generate.checkpoint={g.checkpoint}: no such checkpoint file")
    else:
        check_train(cfg, device)


def load_model(cfg, device, tracker):
    """(model, tokenizer, metrics): from generate.checkpoint, refused if its shape differs from the
    config's, or trained in this job."""
    if not cfg.generate.checkpoint:
        trainer, data, metrics = train_model(cfg, device, tracker)
        return trainer.raw_model, data.tokenizer, metrics
    path = Path(cfg.generate.checkpoint).expanduser()
    chars = checkpoint.load(path).get("signature", {}).get("chars")  # the vocabulary travels with it
    if not chars:
        raise checkpoint.CheckpointError(f"checkpoint {path} has no tokenizer characters in its signature")
    tokenizer = CharTokenizer(chars)
    state = checkpoint.load(path, checkpoint.model_signature(cfg.model, tokenizer.vocab_size, tokenizer.chars))
    model = build_model(cfg, tokenizer.vocab_size)
    model.load_state_dict(state["model"])
    log.info(f"loaded {path} (step {state.get('step', '?')})")
    return model.to(device), tokenizer, {"checkpoint_step": int(state.get("step", -1))}


def encode_prompt(tokenizer, prompt: str) -> list:
    if prompt == "\n" and "\n" not in tokenizer.stoi:  # the schema default, on a vocabulary without it
        log.info(f"generate.prompt: '\\n' is not in the vocabulary {tokenizer.chars!r}; starting from "
              f"{tokenizer.chars[0]!r}")
        return [0]
    return tokenizer.encode(prompt)


def seeded(cfg, device):
    return torch.Generator(device=device).manual_seed(cfg.seed)


def correctness_gate(model, dec, prompt, cfg, device) -> dict:
    """The path's first tokens and logits against recompute's, same seed. Logits are compared only
    while the tokens agree (same context); fp32 must agree on every token, bf16 may diverge at a
    near-tie but its logits on the shared prefix must be within tolerance."""
    n = min(GATE_TOKENS, cfg.generate.tokens)
    ref = Decoder(model, "recompute", dec.B, dec.total, dec.temperature, dec.top_k, dec.keep)
    runs = []
    for d in (ref, dec):
        logits = []
        tokens = d(prompt, seeded(cfg, device), n=n, on_logits=lambda i, x: logits.append(x.float().clone()))
        runs.append((tokens[:, prompt.size(1):].clone(), torch.stack(logits)))
    (ref_tokens, ref_logits), (tokens, logits) = runs
    same = (tokens == ref_tokens).all(0).tolist()
    agree = same.index(False) if False in same else n
    shared = slice(0, min(agree + 1, n))  # logits of step i depend on tokens < i only
    diff = (logits[shared] - ref_logits[shared]).abs().max().item()
    rel = diff / max(ref_logits[shared].abs().max().item(), 1e-6)
    dtype = cfg.train.dtype
    log.info(f"gate: decode={cfg.decode.name} vs recompute ({dtype}): {agree}/{n} tokens agree, "
          f"max |logit diff| {diff:.2e} ({rel:.2e} relative)")
    if rel > GATE_TOL[dtype] or (dtype == "float32" and agree < n):
        raise RuntimeError(f"correctness gate failed: decode={cfg.decode.name} differs from recompute "
                           f"({agree}/{n} tokens agree, relative logit diff {rel:.2e} > {GATE_TOL[dtype]})")
    return {"gate_tokens": n, "gate_tokens_agree": agree, "gate_max_logit_diff": diff, "gate_rel_logit_diff": rel}


def cudagraph_skips() -> int:
    from torch._dynamo.utils import counters
    return int(counters["inductor"].get("cudagraph_skips", 0))


def run(cfg) -> dict:
    tracker = tracking.current()
    device = pick_device(cfg.device)
    g, path = cfg.generate, cfg.decode.name
    model, tokenizer, metrics = load_model(cfg, device, tracker)
    model.eval().to(torch_dtype(cfg.train.dtype))
    seed_everything(cfg.seed)
    prompt = torch.tensor([encode_prompt(tokenizer, g.prompt)], device=device).repeat(g.batch_size, 1)

    skips = cudagraph_skips()
    dec = Decoder(model, path, g.batch_size, prompt.size(1) + g.tokens, g.temperature, g.top_k, cfg.decode.keep,
                  (cfg.decode.block_n, cfg.decode.block_k))
    metrics.update(correctness_gate(model, dec, prompt, cfg, device))

    # the text (this first full run also meets every window length: eager per-shape set-up costs
    # land here), then one more run's rough duration to size the timed repeats; measure() times
    out = dec(prompt, seeded(cfg, device))
    texts = [tokenizer.decode(row[prompt.size(1):]) for row in out]
    sync(device)
    start = time.perf_counter()
    dec(prompt, seeded(cfg, device))
    sync(device)
    once_ms = (time.perf_counter() - start) * 1e3

    gen = seeded(cfg, device)
    stats = measure(lambda: dec(prompt, gen), device, warmup_ms=once_ms,
                    rep_ms=once_ms * (g.repeats + 0.5), min_repeats=g.repeats)
    n_tok = g.batch_size * g.tokens
    per_token = {f"ms_per_token_{k[:-3]}": stats[k] / g.tokens for k in ("p25_ms", "p75_ms", "min_ms", "max_ms")}
    metrics.update(
        decode=path, decode_tok_per_s=n_tok / (stats["median_ms"] / 1e3), ms_per_token=stats["median_ms"] / g.tokens,
        **per_token, generate_ms=stats["median_ms"], repeats=stats["repeats"], tokens=g.tokens,
        batch_size=g.batch_size, setup_s=dec.setup_s,
        capture_s=dec.setup_s if path == "static_graph" else 0.0,
        compile_s=dec.setup_s if path == "compiled" else 0.0,
    )
    if path == "compiled":
        metrics["cudagraph_skips"] = cudagraph_skips() - skips  # > 0 on GPU: Inductor ran without graphs
    if g.profile and device.type == "cuda":
        kp = profile_beside(lambda: dec(prompt, seeded(cfg, device)), g.tokens, metrics["ms_per_token"], "token",
                            tracker, "kernels")
        metrics.update({{"kernel_us": "kernel_us_per_token", "kernels": "kernels_per_token"}.get(k, k): v
                        for k, v in kp.items()})
    tracker.timing("generate", {**stats, "tokens": g.tokens, "batch_size": g.batch_size, "decode": path,
                                "setup_s": dec.setup_s})
    tracker.table("generations", ["decode", "dtype", "index", "prompt", "text", "decode_tok_per_s"],
                  [[path, cfg.train.dtype, i, g.prompt, t, metrics["decode_tok_per_s"]] for i, t in enumerate(texts)])
    log.info(f"\n== generate: decode={path} {cfg.train.dtype} batch {g.batch_size} x {g.tokens} tokens ==\n"
          f"{metrics['decode_tok_per_s']:,.0f} tok/s | {metrics['ms_per_token']:.4f} ms/token "
          f"(p25 {per_token['ms_per_token_p25']:.4f}, p75 {per_token['ms_per_token_p75']:.4f}, "
          f"{stats['repeats']} repeats) | setup {dec.setup_s:.2f} s\nsample: {texts[0][:300]!r}\n"
          f"results: {tracker.job_dir / tracking.RESULTS}")
    return metrics
