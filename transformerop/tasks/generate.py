"""task=generate: a model (loaded from generate.checkpoint, or trained in this job), the decode
parity check against the reference path, then the whole generation of generate.tokens tokens for
generate.batch_size prompts timed along decode.name.

bf16 (train.dtype=bfloat16) decodes with the weights cast to bf16 (`model.to(torch.bfloat16)`),
not under autocast: the KV caches are bf16 too. Graph capture and compilation happen once, when
the Decoder is built, outside the timed region (setup_s); bench.target=generate times the same
way (decode.timed_generation)."""
import logging
from pathlib import Path

import torch

from .. import checkpoint, tracking
from ..data.tokenizer import CharTokenizer
from ..decode import Decoder, get_path, timed_generation
from ..decode import check as check_decode
from ..decode.parity import parity
from ..measure.profiler import profile_beside
from ..model import build_model
from ..runtime import pick_device, seed_everything, torch_dtype
from .train import check as check_train
from .train import train_model

log = logging.getLogger(__name__)

PARITY_TOKENS = 32  # tokens compared with the reference path before timing


def check(cfg, device):
    check_decode(cfg, device)
    g = cfg.generate
    if not g.prompt:
        raise ValueError("generate.prompt is empty: give at least one character to condition on")
    if g.checkpoint:
        if not Path(g.checkpoint).expanduser().is_file():
            raise ValueError(f"generate.checkpoint={g.checkpoint}: no such checkpoint file")
    else:
        check_train(cfg, device)


def needs_data(cfg) -> bool:
    return not cfg.generate.checkpoint  # a checkpoint carries its vocabulary


def load_model(cfg, device, tracker):
    """(model, tokenizer, metrics): from generate.checkpoint, refused if its shape differs from the
    config's, or trained in this job."""
    def check_vocab(vocab_size):  # before any training: the path's kernels may not take this vocabulary
        get_path(cfg.decode.name).check_vocab(cfg.decode.name, vocab_size)

    if not cfg.generate.checkpoint:
        trainer, data, metrics = train_model(cfg, device, tracker, check_vocab)
        return trainer.trained_model(), data.tokenizer, metrics
    path = Path(cfg.generate.checkpoint).expanduser()
    chars = checkpoint.load(path).get("signature", {}).get("chars")  # the vocabulary travels with it
    if not chars:
        raise checkpoint.CheckpointError(f"checkpoint {path} has no tokenizer characters in its signature: "
                                         "give a checkpoint written by task=train")
    tokenizer = CharTokenizer(chars)
    check_vocab(tokenizer.vocab_size)
    state = checkpoint.load(path, checkpoint.model_signature(cfg.model, tokenizer.vocab_size, tokenizer.chars))
    model = build_model(cfg, tokenizer.vocab_size)
    model.load_state_dict(state["model"])
    log.info(f"loaded {path} (step {state.get('step', '?')})")
    return model.to(device), tokenizer, {"checkpoint_step": int(state.get("step", -1))}


def decoder_for(model, cfg, batch_size: int, total_len: int, temperature: float, top_k=None) -> Decoder:
    """The model in the run's dtype (weights cast, eval mode) and a Decoder on it: what both
    task=generate and bench.target=generate time."""
    model.eval().to(torch_dtype(cfg.train.dtype))
    return Decoder(model, cfg.decode.name, batch_size, total_len, temperature, top_k, dcfg=cfg.decode)


def cudagraph_skips() -> int:
    from torch._dynamo.utils import counters
    return int(counters["inductor"].get("cudagraph_skips", 0))


def run(cfg) -> dict:
    tracker = tracking.current()
    device = pick_device(cfg.device)
    g, path = cfg.generate, cfg.decode.name
    model, tokenizer, metrics = load_model(cfg, device, tracker)
    seed_everything(cfg.seed)
    prompt = torch.tensor([tokenizer.encode_prompt(g.prompt)], device=device).repeat(g.batch_size, 1)

    def seeded():
        return torch.Generator(device=device).manual_seed(cfg.seed)

    skips = cudagraph_skips()
    dec = decoder_for(model, cfg, g.batch_size, prompt.size(1) + g.tokens, g.temperature, g.top_k)
    gate = parity(model, dec, prompt, min(PARITY_TOKENS, g.tokens), cfg.train.dtype, seeded)
    log.info(f"parity: decode={path} vs the reference path ({cfg.train.dtype}): {gate['parity_tokens_agree']}/"
             f"{gate['parity_tokens']} tokens agree, relative logit difference {gate['parity_rel_logit_diff']:.2e}")
    metrics.update(gate)

    stats, out = timed_generation(dec, prompt, seeded, device, repeats=g.repeats)
    texts = [tokenizer.decode(row[prompt.size(1):]) for row in out]
    n_tok = g.batch_size * g.tokens
    per_token = {f"ms_per_token_{k[:-3]}": stats[k] / g.tokens for k in ("p25_ms", "p75_ms", "min_ms", "max_ms")}
    cls = get_path(path)
    metrics.update(
        decode=path, decode_tok_per_s=n_tok / (stats["median_ms"] / 1e3), ms_per_token=stats["median_ms"] / g.tokens,
        **per_token, generate_ms=stats["median_ms"], repeats=stats["repeats"], tokens=g.tokens,
        batch_size=g.batch_size, setup_s=dec.setup_s,
        capture_s=dec.setup_s if cls.graphed and device.type == "cuda" else 0.0,
        compile_s=dec.setup_s if cls.compiled else 0.0,
    )
    if cls.compiled:
        metrics["cudagraph_skips"] = cudagraph_skips() - skips  # > 0 on GPU: Inductor ran without graphs
    if g.profile and device.type == "cuda":
        kp = profile_beside(lambda: dec(prompt, seeded()), g.tokens, metrics["ms_per_token"], "token", tracker,
                            "kernels")
        metrics.update({{"kernel_us": "kernel_us_per_token", "kernels": "kernels_per_token"}.get(k, k): v
                        for k, v in kp.items()})
        metrics.update(dec.runner.phase_profile(dec, prompt))  # a one-launch path's phases
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
