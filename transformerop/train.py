"""The training loop: AdamW, warm-up + cosine, grad clipping, periodic eval, atomic
checkpoints with resume, bf16 autocast, optional torch.compile and a CUDA-graphed step. Host
syncs happen only at log/eval points so the loop measures the model, not the loop.

One train step, written once: `forward_backward` (one micro-batch) and `optimizer_step` (clip,
AdamW, zero the grads). `train_step` strings them together eagerly; train.cuda_graph captures
the same two calls (graphed.py); the gradient gate and task=profile call them one by one."""
import contextlib
import logging
import math
import time
from pathlib import Path

import torch
from tqdm import tqdm

from . import checkpoint, clock, distributed
from .master_weights import MasterWeights
from .optim import build_optimizer, lr_at, set_lr
from .runtime import autocast, sync, torch_dtype

log = logging.getLogger(__name__)
LOG_EVERY = 10  # steps between the (one) host sync that reads losses back


class NonFiniteLoss(FloatingPointError):
    pass


@torch.no_grad()
def evaluate_loss(model, batches, device, dtype_name: str) -> float:
    """Mean loss per scored target over `batches` (targets -1 are not scored), one host sync."""
    acc = torch.float32 if torch.device(device).type == "mps" else torch.float64  # MPS has no float64
    total = torch.zeros((), device=device, dtype=acc)
    count = torch.zeros((), device=device, dtype=acc)
    for x, y in batches:
        with autocast(device, dtype_name):
            _, loss = model(x, y)
        n = (y >= 0).sum()
        total += loss.to(acc) * n
        count += n
    return (total / count).item()


def _plant_slow_path(kind: str, x, device):
    """Test hook for the measurement checks: a deliberate per-step host sync or host->device copy."""
    if kind == "host_sync":
        x.sum().item()
    elif kind == "h2d_copy":
        torch.ones(x.shape, dtype=torch.bool).to(device)  # the seed's mask-built-on-host bug


class Trainer:
    def __init__(self, cfg, model, data, device, ckpt_path: Path, tracker=None):
        self.cfg, self.t, self.data, self.device = cfg, cfg.train, data, device
        self.model = model.to(device)
        self.raw_model = self.model
        self.masters = None
        if self.t.master_weights:  # train.fused_step: the same, laid out flat for its kernels
            from .fused_step import FlatMasterWeights
            self.masters = (FlatMasterWeights if self.t.fused_step else MasterWeights)(self.model,
                                                                                      torch_dtype(self.t.dtype))
        self.opt = build_optimizer(self.model, self.t, device, self.masters)
        self.ckpt_path = ckpt_path
        self.tracker = tracker
        self.step, self.best_val, self.best_step = 0, float("inf"), None
        self.rank, self.main = distributed.rank(), distributed.is_main()
        self.gen = torch.Generator(device=device).manual_seed(cfg.seed + self.rank)  # each rank its own batches
        self.signature = checkpoint.model_signature(cfg.model, data.tokenizer.vocab_size, data.tokenizer.chars)
        self.loss_buf = torch.zeros(LOG_EVERY, device=device)
        self.seq_len = data.batch("train", 1, torch.Generator(device=device).manual_seed(0))[0].size(1)
        self.ddp = distributed.active()
        if self.ddp:  # gradients all-reduced (averaged) across ranks in backward
            from torch.nn.parallel import DistributedDataParallel as DDP
            self.model = DDP(self.model, device_ids=[device.index] if device.type == "cuda" else None)
        if self.t.compile:
            self.model = torch.compile(self.model)
        self.graphed = None
        if self.t.cuda_graph:
            from .graphed import GraphedStep
            self.graphed = GraphedStep(self)

    # -- checkpoints ---------------------------------------------------------
    def model_state(self) -> dict:
        """The model's weights as a checkpoint keeps them: fp32 (train.master_weights: the masters)."""
        return self.raw_model.state_dict() if self.masters is None else self.masters.state_dict(self.raw_model)

    def state(self) -> dict:
        return {"model": self.model_state(), "optimizer": self.opt.state_dict(), "step": self.step,
                "best_val": self.best_val, "best_step": self.best_step, "signature": self.signature,
                "rng_cpu": torch.get_rng_state(),
                "rng_cuda": torch.cuda.get_rng_state() if self.device.type == "cuda" else None,
                "rng_batches": distributed.gather_objects(self.gen.get_state()),  # one per rank
                "history": self.tracker.history if self.tracker else []}  # the curve survives a kill

    def save(self) -> None:
        if self.t.checkpoint:
            state = self.state()  # a collective under DDP: every rank takes part
            if self.main:
                checkpoint.save(self.ckpt_path, **state)

    def save_best(self) -> None:
        """Weights of the best eval so far (what a user would sample from after overfitting)."""
        if self.t.checkpoint and self.main:
            checkpoint.save(self.ckpt_path.with_name("best.pt"), model=self.model_state(),
                            signature=self.signature, step=self.step, val_loss=self.best_val)

    def resume(self, path) -> None:
        st = checkpoint.load(path, self.signature)
        self.raw_model.load_state_dict(st["model"])
        if self.masters is not None:  # the checkpoint's fp32 weights, not their bf16 copies, seed the masters
            self.masters.load(self.raw_model, st["model"])
        self.opt.load_state_dict(st["optimizer"])  # in place: a captured step's lr tensor stays the one it reads
        self.step, self.best_val, self.best_step = int(st["step"]), float(st["best_val"]), st.get("best_step")
        torch.set_rng_state(st["rng_cpu"])
        if st.get("rng_cuda") is not None and self.device.type == "cuda":
            torch.cuda.set_rng_state(st["rng_cuda"])
        states = st["rng_batches"]
        if self.rank < len(states):  # resuming on more ranks than saved: the new ones start fresh
            self.gen.set_state(states[self.rank])
        if self.tracker is not None:
            self.tracker.resume_history([h for h in st.get("history", []) if (h.get("step") or 0) <= self.step])

    # -- evaluation ----------------------------------------------------------
    def losses(self, full: bool, splits=("train", "val")) -> dict:
        """Mean loss per split: every target of the split once (full, and addition's held-out
        sums always), or eval_iters random batches from a fixed generator (the same batches every
        eval, so curves compare)."""
        t, out = self.t, {}
        was_training = self.model.training
        self.model.eval()
        for split in splits:
            # addition's held-out sums are few: its val loss is always exact, over all of them
            if full or (self.data.kind == "addition" and split == "val"):
                batches = self.data.eval_batches(split, t.eval_batch_size or t.batch_size)
            else:
                gen = torch.Generator(device=self.device).manual_seed(self.cfg.seed + 1)
                batches = (self.data.batch(split, t.batch_size, gen) for _ in range(t.eval_iters))
            out[split] = evaluate_loss(self.model, batches, self.device, t.dtype)
        self.model.train(was_training)
        return out

    def evaluate(self, full: bool = False, splits=("train", "val")) -> dict:
        losses = self.losses(full, splits)
        m = {f"{k}_loss": v for k, v in losses.items()}
        if self.data.kind == "text":
            m["bits_per_char"] = losses["val"] / math.log(2)
        else:
            with self.full_precision() as model:  # greedy decoding outside autocast reads fp32 weights
                m["exact_match"], _ = self.data.exact_match(model)
        return m

    # -- one step --------------------------------------------------------------
    def next_batch(self):
        """The next training micro-batch (and the planted slow path, when a test asks for one)."""
        x, y = self.data.batch("train", self.t.batch_size, self.gen)
        _plant_slow_path(self.t.slow_path, x, self.device)
        return x, y

    def forward(self, x, y):
        """The loss of one micro-batch under the run's autocast (no weight-cast cache in a graph)."""
        with autocast(self.device, self.t.dtype, cache=self.graphed is None):
            return self.model(x, y)[1]

    def forward_backward(self, x, y, scale: float = 1.0):
        """One micro-batch: forward, then backward of loss * scale."""
        loss = self.forward(x, y)
        (loss * scale if scale != 1.0 else loss).backward()
        return loss.detach()

    def optimizer_step(self) -> None:
        """Clip (on the device), AdamW, and drop the grads for the next step (train.master_weights:
        on the fp32 masters, MasterWeights.step)."""
        if self.masters is not None:
            self.masters.step(self.opt, self.t.grad_clip, list(self.model.parameters()))
        else:
            if self.t.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.t.grad_clip)
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def eager_step(self):
        """grad_accum micro-batches, then one optimizer step. Returns the last micro-batch's loss."""
        t = self.t
        for micro in range(t.grad_accum):
            x, y = self.next_batch()
            last = micro == t.grad_accum - 1
            # Under DDP, all-reduce gradients only once, on the last micro-step.
            with self.model.no_sync() if self.ddp and not last else contextlib.nullcontext():
                loss = self.forward_backward(x, y, 1.0 / t.grad_accum)
            if self.masters is not None and not last:  # accumulated in fp32, as autocast's casts would
                self.masters.pull()
        self.optimizer_step()
        return loss

    @contextlib.contextmanager
    def full_precision(self):
        """The trained model with fp32 weights inside (train.master_weights: its masters), for what
        reads the model outside autocast after training: sampling, exact match."""
        with self.masters.full_precision() if self.masters is not None else contextlib.nullcontext():
            yield self.raw_model

    def trained_model(self):
        """The model with fp32 weights for good, once training is over (train.master_weights: the
        masters become its parameters; no captured step replays after this)."""
        if self.masters is not None:
            self.masters.release()
            self.masters, self.graphed = None, None
        return self.raw_model

    def train_step(self, step: int):
        set_lr(self.opt, lr_at(step, self.t))
        return self.graphed(step) if self.graphed is not None else self.eager_step()

    # -- loop ----------------------------------------------------------------
    def _check_losses(self, upto: int) -> float:
        """One host sync: raise on the first non-finite loss since the last check."""
        n = (upto - 1) % LOG_EVERY + 1
        losses = self.loss_buf[:n].tolist()
        for i, v in enumerate(losses):
            if not math.isfinite(v):
                raise NonFiniteLoss(f"loss became {v} at step {upto - n + i}; "
                                    f"the last good checkpoint is kept at {self.ckpt_path}")
        return sum(losses) / n

    def _eval_point(self, step: int) -> dict:
        """An in-loop eval. With a target loss the stop decision reads the whole val split (the
        quantity the target names); otherwise train.eval_full / eval_train choose."""
        t = self.t
        if t.target_loss is not None:
            return self.evaluate(True, ("val",))
        return self.evaluate(t.eval_full, ("train", "val") if t.eval_train else ("val",))

    def fit(self) -> dict:
        t = self.t
        start = self.step
        # disable=None: the bar turns itself off when stderr is not a terminal (logs, CI, sweeps)
        bar = tqdm(total=t.max_iters, initial=start, disable=None if t.progress and self.main else True,
                   desc="train", mininterval=1.0)
        last = {}
        self.model.train()
        t_log, step_log = time.perf_counter(), start
        reached, eval_s, first_step_at = None, 0.0, None
        for step in range(start, t.max_iters + 1):
            self.step = step
            # a target run skips the step-0 eval: untrained weights cannot meet a target, and the
            # eval would sit on the launch-to-target clock
            untrained_target_check = step == 0 < t.max_iters and t.target_loss is not None
            if (step % t.eval_interval == 0 or step == t.max_iters) and not untrained_target_check:
                if step > start or start == 0:
                    if step > start:
                        self._check_losses(step)
                    t_eval = time.perf_counter()
                    last = self._eval_point(step)
                    eval_s += time.perf_counter() - t_eval
                    if last["val_loss"] < self.best_val:
                        self.best_val = last["val_loss"]
                        self.best_step = step
                        self.save_best()
                    if self.tracker:
                        self.tracker.log({**{f"eval/{k}": v for k, v in last.items()}, "train/lr": lr_at(step, t)},
                                         step=step)
                    if self.main:
                        log.info(f"step {step}: " + ", ".join(f"{k} {v:.4f}" for k, v in last.items()))
                    if t.target_loss is not None and last["val_loss"] <= t.target_loss:
                        reached = step  # on the job's clock: imports, capture, compile, evals included
                        self.time_to_target_s = clock.since_origin()
                        break
                    if step < t.max_iters:
                        self.save()
                    t_log, step_log = time.perf_counter(), step  # eval time stays out of the step time
            if step == t.max_iters:
                break
            if first_step_at is None:
                clock.mark("eval_at_start")
            loss = self.train_step(step)
            if first_step_at is None:  # start-up ends when the first step is done (capture, compile in it)
                sync(self.device)
                first_step_at = clock.end_startup()
            self.loss_buf[step % LOG_EVERY] = loss
            if (step + 1) % LOG_EVERY == 0:
                mean = self._check_losses(step + 1)
                sync(self.device)
                now = time.perf_counter()
                dt = (now - t_log) / (step + 1 - step_log)
                t_log, step_log = now, step + 1
                toks = t.batch_size * t.grad_accum * self.seq_len * distributed.world_size() / dt  # all ranks
                bar.set_postfix(loss=f"{mean:.4f}", tok_s=f"{toks:,.0f}", refresh=False)
                if self.tracker:
                    self.tracker.log({"train/loss": mean, "train/window_tok_per_s": toks,
                                      "train/window_step_ms": dt * 1e3}, step=step + 1)
            bar.update(1)
        bar.close()
        self.step = t.max_iters if reached is None else reached
        self.save()
        out = {**last, "steps": self.step, "best_val_loss": self.best_val, "best_step": self.best_step,
               "eval_s": eval_s}
        p = clock.prefix()
        if first_step_at is not None:
            out[f"{p}startup_s"] = first_step_at
        if reached is not None:
            out.update({"target_step": reached, f"{p}time_to_target_s": self.time_to_target_s})
        return out
