"""task=profile: where a train step's time goes, and how much the instrument distorts it.

1. Phase breakdown (forward / backward / optimizer) measured two ways, both with measure():
   - one sync: cumulative prefixes fwd | fwd+bwd | fwd+bwd+opt, each timed as a whole (the
     device syncs only at the end); a phase = the difference of two prefixes.
   - per-phase syncs: the same prefixes with a device sync after every phase -- what a per-phase
     timer does. The ratio of the two is the instrument-distortion check (the seed's per-phase
     timer slowed the runs it measured). On CPU a sync is a no-op: the two agree up to noise.
   Each phase also gets Amdahl's bound: the step speedup if that phase alone were 2x faster.
2. The whole Trainer.train_step timed against predict_train_step (ratio, flag, MFU).
3. torch.profiler over a few steps (forward/backward/optimizer labelled): a chrome trace in the
   job dir (logged to W&B as a file), a top-ops table (self time, count, % of the profiled step),
   and on CUDA the kernel count per step beside the launch-term estimate.
"""
import logging

from torch.profiler import ProfilerActivity, profile, record_function

from .. import tracking
from ..data import build_data
from ..measure import calibration, timing
from ..measure.predict import flag_line, judge, predict_train_step
from ..measure.profiler import on_device
from ..measure.roofline import amdahl
from ..measure.timing import measure
from ..optim import lr_at, set_lr
from ..runtime import pick_device, seed_everything, sync
from .bench import make_trainer, peak_of_one_call

log = logging.getLogger(__name__)

PROFILED_STEPS = 3
TOP_OPS = 15
PHASES = ("forward", "backward", "optimizer")


def check(cfg, device) -> None:
    if cfg.train.grad_accum != 1:
        raise ValueError("task=profile splits one micro-step into phases: use train.grad_accum=1")


class Phases:
    """The trainer's own step (Trainer.next_batch, forward, backward, optimizer_step) cut into
    three phases, so each can be timed and labelled on its own."""

    def __init__(self, trainer, data):
        self.tr, self.data, self.loss = trainer, data, None
        set_lr(trainer.opt, lr_at(trainer.t.warmup_iters, trainer.t))  # steady state (in place: a tensor stays one)

    def forward(self):
        self.loss = self.tr.forward(*self.tr.next_batch())

    def backward(self):
        self.loss.backward()

    def optimizer(self):
        self.tr.optimizer_step()

    def prefix(self, n: int, synced: bool):
        """The first n phases as one callable; synced puts a device sync after each phase. A
        prefix that stops after backward drops the grads, as the optimizer phase would."""
        fns = [getattr(self, p) for p in PHASES[:n]]
        device = self.tr.device

        def run():
            for fn in fns:
                fn()
                if synced:
                    sync(device)
            if n == 2:
                self.tr.opt.zero_grad(set_to_none=True)
        return run


def phase_breakdown(ph: Phases, cfg, device) -> tuple:
    b = cfg.bench
    rows, totals = [], {}
    for synced in (False, True):
        prefix_ms = [measure(ph.prefix(n, synced), device, b.warmup_ms, b.rep_ms)["median_ms"] for n in (1, 2, 3)]
        totals[synced] = prefix_ms
    one, per = totals[False], totals[True]
    for i, name in enumerate(PHASES):
        a = one[i] - (one[i - 1] if i else 0.0)
        s = per[i] - (per[i - 1] if i else 0.0)
        share = min(1.0, max(0.0, a / one[-1]))
        rows.append([name, a, s, s / a if a > 0 else None, share, amdahl(share, 2.0)])
    rows.append(["step", one[-1], per[-1], per[-1] / one[-1], 1.0, 2.0])
    return rows


def top_ops(prof, device, step_count: int) -> tuple:
    """(rows, device ops per step). Rows are host-side ops ranked by self time -- device time on
    CUDA (each kernel is attributed to the innermost op that launched it, so summing op rows
    counts every kernel once), host time on CPU. % is of the profiled steps' total."""
    cuda = device.type == "cuda"

    def self_us(e):
        if cuda:
            return getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        return e.self_cpu_time_total

    events = [e for e in prof.key_averages() if not on_device(e) and e.key not in PHASES]
    total = sum(self_us(e) for e in events) or 1.0
    events.sort(key=self_us, reverse=True)
    rows = [[e.key[:90], self_us(e) / 1e3 / step_count, e.count / step_count, 100.0 * self_us(e) / total]
            for e in events[:TOP_OPS] if self_us(e) > 0]
    kernels = sum(1 for e in prof.events() if on_device(e)) / step_count if cuda else None
    return rows, kernels


def run(cfg) -> dict:
    tracker = tracking.current()
    device = pick_device(cfg.device)
    seed_everything(cfg.seed)
    cal = calibration.load(device)
    data = build_data(cfg, device)
    trainer = make_trainer(cfg, device, data, tracker.job_dir)
    ph = Phases(trainer, data)
    pred = predict_train_step(cfg, data.tokenizer.vocab_size, device, seq_len=trainer.seq_len, ceilings=cal)
    log.info(f"profile train_step: B={cfg.train.batch_size} T={trainer.seq_len} dtype={cfg.train.dtype} "
          f"attention={cfg.attention.name} slow_path={cfg.train.slow_path} device={device}; "
          f"predicted {pred['predicted_ms']:.3f} ms ({pred['bound']}-bound, ceilings {cal['source']})")

    # the whole step, as train jobs run it, against the prediction
    step = [0]

    def train_step():
        trainer.train_step(step[0])
        step[0] += 1
    row = judge(measure(train_step, device, cfg.bench.warmup_ms, cfg.bench.rep_ms), pred, cfg.bench.flag_ratio)
    row.update({k: v for k, v in pred.items() if k.startswith("mem_")}, **peak_of_one_call(train_step, device))
    tracker.timing("train_step", row)
    log.info(flag_line("train_step", row))

    phases = phase_breakdown(ph, cfg, device)
    tracker.table("phases", ["phase", "one_sync_ms", "per_phase_sync_ms", "sync_over_one", "share_of_step",
                             "step_speedup_if_2x"], phases)

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    if device.type == "cuda":  # CUPTI, which stays attached, profiles the GPU
        timing.profiling_gpu()
    with profile(activities=acts) as prof:
        for _ in range(PROFILED_STEPS):
            for name in PHASES:
                with record_function(name):
                    getattr(ph, name)()
        sync(device)
    trace = tracker.job_dir / "trace.json"
    prof.export_chrome_trace(str(trace))
    tracker.file(trace)
    ops, kernels = top_ops(prof, device, PROFILED_STEPS)
    tracker.table("top_ops", ["name", "self_ms_per_step", "count_per_step", "pct_of_step"], ops)

    _print(phases, ops, kernels, pred, trace)
    by = {r[0]: r for r in phases}
    metrics = {"step_ms": row["median_ms"], "predicted_ms": pred["predicted_ms"],
               "measured_over_predicted": row["measured_over_predicted"], "flagged": row["flagged"],
               "mfu": row["mfu"], "peak_memory_bytes": row["peak_memory_bytes"], "mem_total": pred["mem_total"],
               "kernels_per_step_predicted": pred["kernels"], "trace": str(trace)}
    for name in PHASES + ("step",):
        metrics[f"{name}_ms"] = by[name][1]
        metrics[f"{name}_synced_ms"] = by[name][2]
    metrics["sync_over_one"] = by["step"][3]
    if kernels is not None:
        metrics["kernels_per_step_measured"] = kernels
    return metrics


def _print(phases, ops, kernels, pred, trace) -> None:
    log.info(f"\n{'phase':<10} {'one sync ms':>12} {'per-phase sync ms':>18} {'ratio':>7} {'share':>7} "
             f"{'step x if 2x':>13}")
    for name, a, s, r, share, amd in phases:
        ratio = r if r is not None else float("nan")
        log.info(f"{name:<10} {a:>12.3f} {s:>18.3f} {ratio:>7.2f} {share:>7.1%} {amd:>13.2f}")
    log.info(f"\n{'top ops (self time)':<60} {'ms/step':>9} {'count/step':>11} {'% step':>7}")
    for name, ms, count, pct in ops:
        log.info(f"{name[:60]:<60} {ms:>9.3f} {count:>11.1f} {pct:>7.1f}")
    if kernels is not None:
        log.info(f"device ops per step: {kernels:.0f} measured vs {pred['kernels']} estimated (launch term)")
    log.info(f"trace: {trace}")
