"""task=train: build data and model, train (resuming from the run dir's checkpoint), sample."""
import logging
import statistics
from pathlib import Path

import torch
from hydra.core.hydra_config import HydraConfig

from .. import clock, cuda_early, distributed, tracking
from ..data import build_data
from ..decode import generate
from ..errors import ConfigError
from ..measure.predict import flag_line, judge, predict_train_step
from ..measure.profiler import profile_beside
from ..measure.timing import summarize
from ..model import build_model, count_params
from ..runtime import interpreting, peak_memory_bytes, pick_device, reset_peak_memory, seed_everything
from ..train import LOG_EVERY, Trainer

log = logging.getLogger(__name__)


def _resume_setting(r):
    """train.resume -> None (start fresh), "latest" (this run dir's checkpoint) or a file Path."""
    if r is None or r is False or (isinstance(r, str) and r.lower() in ("false", "no", "none", "")):
        return None
    if r is True or (isinstance(r, str) and r.lower() in ("true", "yes")):
        return "latest"
    path = Path(str(r)).expanduser()
    if not path.is_file():
        raise ValueError(f"train.resume={r}: no such checkpoint file (give a .pt path, true for this run "
                         "dir's latest, or false)")
    return path


def resume_path(cfg, job_dir: Path):
    setting = _resume_setting(cfg.train.resume)
    if setting == "latest":
        ckpt = job_dir / "ckpt.pt"
        return ckpt if ckpt.exists() else None
    return setting


def check(cfg, device):
    t = cfg.train
    if t.cuda_graph:
        from ..model import BackendUnavailable
        if device.type != "cuda":
            raise BackendUnavailable("train.cuda_graph=true needs CUDA (it captures the step in a CUDA graph)")
        if t.grad_accum != 1 or distributed.world_size() > 1 or t.slow_path != "none":
            raise ValueError("train.cuda_graph=true captures one plain step: needs train.grad_accum=1, "
                             "a single process and train.slow_path=none")
    if t.fused_step and not t.master_weights:
        raise ConfigError("train.fused_step=true steps the fp32 masters of train.master_weights: set "
                          "train.master_weights=true (or train.fused_step=false)")
    if t.fused_step and device.type != "cuda" and not interpreting():
        from ..model import BackendUnavailable
        raise BackendUnavailable("train.fused_step=true needs a CUDA GPU for its Triton kernels "
                                 "(TRITON_INTERPRET=1 runs them on CPU, slowly)")
    if t.master_weights and t.dtype == "float32":
        raise ConfigError("train.master_weights=true keeps bf16 copies of the weights for autocast: needs "
                          "train.dtype=bfloat16 (or train.master_weights=false)")
    _resume_setting(t.resume)


def train_model(cfg, device, tracker, check_vocab=None):
    """Shared by tasks that need a trained model: returns (trainer, data, metrics). check_vocab(V):
    the caller's check of the data's vocabulary, run before the model is built."""
    job_dir = Path(HydraConfig.get().runtime.output_dir)
    seed_everything(cfg.seed)
    data = build_data(cfg, device)
    if check_vocab is not None:
        check_vocab(data.tokenizer.vocab_size)
    clock.mark("data")
    model = build_model(cfg, data.tokenizer.vocab_size, device)
    trainer = Trainer(cfg, model, data, device, job_dir / "ckpt.pt", tracker)
    ckpt = resume_path(cfg, job_dir)
    if ckpt is not None:
        trainer.resume(ckpt)
        log.info(f"resumed from {ckpt} at step {trainer.step}")
    clock.mark("model")
    pred = predict_train_step(cfg, data.tokenizer.vocab_size, device, seq_len=trainer.seq_len)
    n_params = count_params(model)
    if distributed.is_main():
        log.info(f"predicted train step {pred['predicted_ms']:.3f} ms ({pred['bound']}-bound; ceilings: "
                 f"{pred['ceilings']}), predicted memory {pred['mem_total'] / 2**20:.1f} MiB (weights, grads, "
                 "AdamW, activations)")
        log.info(f"{cfg.model.name}: {n_params:,} parameters, data={cfg.data.name}, "
                 f"attention={cfg.attention.name}, device={device}, dtype={cfg.train.dtype}")
    metrics = trainer.fit()
    startup = clock.phases()
    if "first_step" in startup:  # launch -> first step done, by phase (on the job's clock)
        metrics.update({f"startup/{k}_s": v for k, v in startup.items()})
        log.info(f"{clock.prefix()}startup {metrics.get(clock.prefix() + 'startup_s', 0):.2f} s: "
                 + ", ".join(f"{k} {v:.2f}" for k, v in startup.items()))
        warm = cuda_early.ended_on(clock.origin())  # what the `warm` phase waited for: the last to end
        if warm:
            metrics.update({f"warmup_ended/{k}_s": v for k, v in warm.items()})
            log.info("warm-ups ended at (s on the same clock): " + ", ".join(f"{k} {v:.2f}" for k, v in warm.items()))
    _judge_step_time(cfg, tracker, pred)
    return trainer, data, {"params": n_params, **metrics}


def _judge_step_time(cfg, tracker, pred) -> None:
    """The loop's own step time (median of its synced 10-step windows) beside the prediction."""
    windows = [h["train/window_step_ms"] for h in tracker.history if "train/window_step_ms" in h][1:]  # 1st: warm-up
    toks = [h["train/window_tok_per_s"] for h in tracker.history if "train/window_tok_per_s" in h][1:]
    if len(windows) < 2:
        return
    stats = summarize(windows, "first window excluded", f"training loop, {LOG_EVERY}-step windows between host syncs")
    row = judge(stats, pred, cfg.bench.flag_ratio)
    tracker.timing("train_step", row)
    tracker.set(step_ms=row["median_ms"], predicted_step_ms=row["predicted_ms"],
                step_measured_over_predicted=row["measured_over_predicted"], mfu=row["mfu"],
                predicted_memory_bytes=pred["mem_total"], tok_per_s=statistics.median(toks))
    if distributed.is_main():
        log.info(flag_line("train_step", row))


PROFILE_STEPS = 10


def _profile_steps(trainer, tracker) -> None:
    """train.profile: kernel time over PROFILE_STEPS more steps (after everything above is
    recorded; the model they change is not saved) beside the loop's median step time."""
    row = tracker.timings.get("train_step")
    if not row:
        return
    start = trainer.step

    def steps():
        for i in range(PROFILE_STEPS):
            trainer.train_step(start + i)
    row.update(profile_beside(steps, PROFILE_STEPS, row["median_ms"], "step", tracker, "train_step_kernels"))
    tracker.timing("train_step", row)


def run(cfg) -> dict:
    tracker = tracking.current()
    device = pick_device(cfg.device)
    reset_peak_memory(device)
    trainer, data, metrics = train_model(cfg, device, tracker)
    if data.kind == "addition":
        with trainer.full_precision() as model:
            em, samples = data.exact_match(model)
        metrics["exact_match"] = em
    else:
        if "target_step" not in metrics:  # a target stop's own check already read the whole val split
            final = trainer.evaluate(full=True, splits=("val",))  # the reported val loss: the whole split
            metrics.update(val_loss=final["val_loss"], bits_per_char=final["bits_per_char"])
        samples = []
        if cfg.train.sample_tokens:  # 0: no sample
            prompt = torch.tensor([data.tokenizer.encode_prompt("\n")], device=device)
            gen = torch.Generator(device=device).manual_seed(cfg.seed)
            with trainer.full_precision() as model:
                out = generate(model, prompt, cfg.train.sample_tokens, temperature=1.0, generator=gen)
            samples = [data.tokenizer.decode(out[0])]
    metrics["peak_memory_bytes"] = peak_memory_bytes(device)
    tracker.table("samples", ["sample"], [[s] for s in samples])
    if cfg.train.profile and device.type == "cuda" and distributed.world_size() == 1:
        _profile_steps(trainer, tracker)
    clock.train_over.set()  # what this job times is over: logger.start=train_end starts W&B now
    if distributed.is_main():
        _print_summary(cfg, metrics, samples, tracker)
    return metrics


def _print_summary(cfg, m, samples, tracker):
    lines = ["", "== summary ==",
             f"params {m['params']:,} | steps {m['steps']} | val_loss {m['val_loss']:.4f}"
             f" (best {m['best_val_loss']:.4f} at step {m['best_step']})"
             + (f" | held-out exact match {m['exact_match']:.2%}" if "exact_match" in m else "")
             + (f" | bits/char {m['bits_per_char']:.3f}" if "bits_per_char" in m else "")]
    p = clock.prefix()
    if f"{p}time_to_target_s" in m:
        lines.append(f"target val_loss <= {cfg.train.target_loss} (whole val split) reached at step "
                     f"{m['target_step']} after {m[p + 'time_to_target_s']:.2f} s "
                     + ("from launch" if not p else "from the job's start"))
    lines += [f"sample: {s if cfg.data.name == 'addition' else s[:300]}" for s in samples[:4]]
    lines.append(f"results: {tracker.job_dir / tracking.RESULTS}")
    w = tracker.wandb_info()
    if w["mode"] != "off":
        lines.append(f"W&B ({w['mode']}): run {w['run_id']} in {w['dir']}")
        if w["mode"] == "offline":
            lines.append("upload with: wandb sync " + " ".join(w["folders"] or [w["dir"]]))
    log.info("\n".join(lines))
