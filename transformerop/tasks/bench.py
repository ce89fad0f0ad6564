"""task=bench: time one target -- correct first, predicted second, measured third.

bench.target:
  matmul      the FFN up-projection at the model's shapes: (B*T, C) @ (C, 4C)
  softmax     the attention softmax (attention.softmax): B*H*T rows of T (bench.rows/cols)
  attention   the selected backend's attend(q, k, v): forward, and forward+backward (bench.backward);
              bench.graph=true replays each captured in a CUDA graph
  forward     one inference forward of the model; bench.graph=true replays one captured CUDA graph
  train_step  Trainer.train_step: forward + backward + clipping + AdamW (train.slow_path applies)
  generate    decode.name path: a random prompt of block_size/4 tokens, then the rest of the block

For every target: random inputs (never zeros) -> check against a float64 reference (a mismatch
raises reference.Mismatch: the job fails and no timing is logged) -> predict (roofline + launch
term, ceilings from the calibration cache) -> measure() -> judge: measured/predicted (flagged
beyond bench.flag_ratio either way), MFU against the prediction's (measured when calibrated)
peak, predicted memory beside the measured peak.

Injecting a wrong kernel (tests): patch the backend class in this process, e.g.
`monkeypatch.setattr(SDPAAttention, "attend", wrong)`, then run the job through
transformerop.jobs.run_job. The references never call a backend's attend, so the check catches it.
"""
import logging

import torch

from .. import decode, tracking
from ..config import BenchTarget
from ..data import build_data
from ..measure import calibration
from ..measure.predict import flag_line, judge
from ..measure.profiler import profile_beside
from ..measure.timing import host_time, measure
from ..model import BackendUnavailable, get_backend
from ..runtime import peak_memory_bytes, pick_device, reset_peak_memory, seed_everything, sync, torch_dtype
from .bench_cases import SETUPS, Ctx, dims, make_trainer  # noqa: F401  (make_trainer: profile, calibrate)
from .train import check as check_train

log = logging.getLogger(__name__)

PROFILE_CALLS = 20  # bench.profile: calls averaged into kernel time per call
TARGETS = tuple(t.value for t in BenchTarget)
MODEL_TARGETS = ("forward", "train_step", "generate")
GRAPH_TARGETS = ("attention", "forward")


def needs_data(cfg) -> bool:
    return cfg.bench.target in MODEL_TARGETS


def check(cfg, device) -> None:
    b = cfg.bench
    if b.target not in TARGETS:
        raise ValueError(f"bench.target={b.target!r}: choose one of {list(TARGETS)}")
    if b.graph and b.target not in GRAPH_TARGETS:
        raise ValueError(f"bench.graph=true applies to bench.target={' or '.join(GRAPH_TARGETS)}, not {b.target} "
                         "(train_step: train.cuda_graph=true)")
    if b.graph and torch.device(device).type != "cuda":
        raise BackendUnavailable("bench.graph=true needs CUDA graphs (no CUDA device here)")
    if b.target not in MODEL_TARGETS and cfg.model.name != "gpt":
        raise ValueError(f"bench.target={b.target} takes its shapes from a GPT, not model.name={cfg.model.name}")
    if b.target == "attention" and not hasattr(get_backend(cfg.attention.name), "attend"):
        raise ValueError(f"attention={cfg.attention.name} has no attend(q, k, v) to time alone: "
                         "use bench.target=forward")
    if b.target in ("forward", "generate") and b.seq_len and b.seq_len > cfg.model.block_size:
        raise ValueError(f"bench.seq_len={b.seq_len} exceeds model.block_size={cfg.model.block_size}")
    if b.target == "train_step" and b.seq_len:
        raise ValueError(f"bench.seq_len={b.seq_len}: bench.target=train_step trains on the data's own windows "
                         "(model.block_size for text, the problem's length for addition); drop bench.seq_len "
                         "and set model.block_size")
    if b.target == "generate":
        decode.check(cfg, device)
    if b.target == "train_step":  # train.cuda_graph needs CUDA: skipped with that reason, not a crash
        check_train(cfg, torch.device(device))

COLUMNS = ["case", "median_ms", "p25_ms", "p75_ms", "repeats", "predicted_ms", "measured_over_predicted",
           "flagged", "bound", "mfu", "peak_source", "tok_per_s", "mem_predicted", "peak_memory_bytes"]


# -- the job ---------------------------------------------------------------------------------------
def peak_of_one_call(fn, device) -> dict:
    """Peak memory over one fn() call, taken apart from measure(): do_bench allocates a 256 MB
    L2-flush buffer that would otherwise count. CPU: the process's peak RSS so far (it includes
    the interpreter and libraries and cannot be reset)."""
    reset_peak_memory(device)
    fn()
    sync(device)
    kind = "cuda max_memory_allocated" if device.type == "cuda" else "process peak RSS"
    return {"peak_memory_bytes": peak_memory_bytes(device), "peak_memory_kind": kind}


def run(cfg) -> dict:
    tracker = tracking.current()
    device = pick_device(cfg.device)
    seed_everything(cfg.seed)
    B, T = dims(cfg)
    cal = calibration.load(device)
    ctx = Ctx(cfg, device, cfg.train.dtype, torch_dtype(cfg.train.dtype), B, T, cal)
    data = build_data(cfg, device) if cfg.bench.target in MODEL_TARGETS else None
    shape = f"B={B} T={'the data windows' if cfg.bench.target == 'train_step' else T}"
    if cfg.bench.target == "softmax":
        shape = f"rows={cfg.bench.rows or B * cfg.model.n_head * T} cols={cfg.bench.cols or T}"
    log.info(f"bench {cfg.bench.target}: {shape} dtype={cfg.train.dtype} attention={cfg.attention.name} "
          f"device={device}; ceilings for {cal['device_name']}: {cal['source']} ({cal['path']})")
    cases = SETUPS[cfg.bench.target](ctx, data)

    checks = {}
    for case in cases:  # every case is checked before anything is timed
        checks.update(case.verify())
    log.info("correct: " + ", ".join(f"{k}={v:.2e}" if isinstance(v, float) else f"{k}={v}" for k, v in checks.items()))
    preds = {case.name: case.predict() for case in cases}  # the prediction is written down before timing

    metrics, rows, timed = {f"check_{k}": v for k, v in checks.items()}, [], []
    for case in cases:
        pred = preds[case.name]
        case.prepare()
        stats = case.timer() if case.timer else measure(case.fn, device, cfg.bench.warmup_ms, cfg.bench.rep_ms)
        row = judge(stats, pred, cfg.bench.flag_ratio)
        row.update({k: v for k, v in pred.items() if k.startswith("mem_")}, **case.info,
                   **peak_of_one_call(case.fn, device))
        if device.type == "cuda":  # the host's share of one call, beside the wall (and kernel) time
            row.update(_host(case.fn, device))
        if case.tokens:
            row["tokens"], row["tok_per_s"] = case.tokens, case.tokens / (stats["median_ms"] / 1e3)
        log.info(flag_line(case.name, row))
        timed.append((case, row))
    # Profiled only once every case is timed: the profiler leaves CUPTI attached to the process,
    # and every later launch pays for it (measured on the H200: a bare op's host time doubled).
    for case, row in timed:
        if cfg.bench.profile and device.type == "cuda":  # kernel time per call beside the wall time
            row.update(profile_beside(lambda fn=case.fn: [fn() for _ in range(PROFILE_CALLS)], PROFILE_CALLS,
                                      row["median_ms"], "call", tracker, f"{case.name}_kernels"))
        tracker.timing(case.name, row)
        _print_memory(row)
        rows.append([case.name] + [row.get("mem_total") if c == "mem_predicted" else row.get(c) for c in COLUMNS[1:]])
        metrics.update(_flat(case.name, row))
    tracker.table("bench", COLUMNS, rows)
    metrics["flagged"] = any(r[COLUMNS.index("flagged")] for r in rows)
    return metrics


def _host(fn, device) -> dict:
    """host_time, logged; a failure is logged and recorded (host_error): the timing stands without it."""
    try:
        h = host_time(fn, device)
    except Exception as e:  # noqa: BLE001
        log.info(f"  host: failed ({type(e).__name__}: {e}); the timing stands")
        return {"host_us": None, "host_error": f"{type(e).__name__}: {e}"}
    log.info(f"  host: {h['host_note']}" if h["host_us"] is None else
             f"  host: {h['host_us']:.1f} us of the calling thread per call in back-to-back calls "
             f"(p25-p75 {h['host_p25_us']:.1f}-{h['host_p75_us']:.1f})")
    return h


def _flat(name: str, row: dict) -> dict:
    keys = ("median_ms", "predicted_ms", "measured_over_predicted", "flagged", "mfu", "tok_per_s",
            "peak_memory_bytes", "mem_total", "kernel_us", "kernels", "gpu_busy", "host_us")
    return {f"{name}_{k}": row[k] for k in keys if row.get(k) is not None}


def _print_memory(row: dict) -> None:
    parts = {k[4:]: v for k, v in row.items() if k.startswith("mem_") and k != "mem_total"}
    if parts:
        log.info("  memory predicted " + " + ".join(f"{k} {v / 2**20:.1f}" for k, v in parts.items())
              + f" = {row['mem_total'] / 2**20:.1f} MiB; measured peak {row['peak_memory_bytes'] / 2**20:.1f} MiB "
              f"({row['peak_memory_kind']})")
