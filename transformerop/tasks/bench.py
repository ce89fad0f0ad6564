"""task=bench: time one target -- correct first, predicted second, measured third.

bench.target:
  matmul      the FFN up-projection at the model's shapes: (B*T, C) @ (C, 4C)
  softmax     the attention softmax (attention.softmax): B*H*T rows of T (bench.rows/cols)
  attention   the selected backend's attend(q, k, v): forward, and forward+backward (bench.backward)
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
import copy
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from .. import decode, tracking
from ..decode import timed_generation
from ..decode.parity import parity
from ..data import build_data
from ..graphs import capture
from ..measure import calibration, reference as ref
from ..measure import roofline as R
from ..measure.predict import flag_line, judge, predict_forward, predict_generate, predict_op, predict_train_step
from ..measure.timing import measure
from ..model import BackendUnavailable, build_model, get_backend
from ..model.attention.softmax import get_softmax
from ..runtime import (autocast, peak_memory_bytes, pick_device, reset_peak_memory, seed_everything, sync,
                       torch_dtype)
from ..train import Trainer
from .train import check as check_train
from ..measure.profiler import profile_beside

log = logging.getLogger(__name__)

PROFILE_CALLS = 20  # bench.profile: calls averaged into kernel time per call
TARGETS = ("matmul", "softmax", "attention", "forward", "train_step", "generate")
MODEL_TARGETS = ("forward", "train_step", "generate")


@dataclass
class Case:
    """One timed region: fn is timed; verify() raises Mismatch; predict() returns predict.* dict."""
    name: str
    fn: Callable
    verify: Callable[[], dict]
    predict: Callable[[], dict]
    tokens: int = 0  # tokens processed per fn() call, for tok/s (0: not a token workload)
    info: dict = field(default_factory=dict)
    prepare: Callable[[], None] = lambda: None  # after verify, before timing (graph capture)
    timer: Callable[[], dict] | None = None  # the region's own timing, when measure(fn) is not it


@dataclass
class Ctx:
    cfg: object
    device: torch.device
    dtype_name: str
    dtype: torch.dtype
    B: int
    T: int
    cal: dict


def check(cfg, device) -> None:
    b = cfg.bench
    if b.target not in TARGETS:
        raise ValueError(f"bench.target={b.target!r}: choose one of {list(TARGETS)}")
    if b.graph and b.target != "forward":
        raise ValueError(f"bench.graph=true applies to bench.target=forward, not {b.target}")
    if b.graph and torch.device(device).type != "cuda":
        raise BackendUnavailable("bench.graph=true needs CUDA graphs (no CUDA device here)")
    if b.target not in MODEL_TARGETS and cfg.model.name != "gpt":
        raise ValueError(f"bench.target={b.target} takes its shapes from a GPT, not model.name={cfg.model.name}")
    if b.target == "attention" and not hasattr(get_backend(cfg.attention.name), "attend"):
        raise ValueError(f"attention={cfg.attention.name} has no attend(q, k, v) to time alone: "
                         "use bench.target=forward")
    if b.target in ("forward", "generate") and b.seq_len and b.seq_len > cfg.model.block_size:
        raise ValueError(f"bench.seq_len={b.seq_len} exceeds model.block_size={cfg.model.block_size}")
    if b.target == "generate":
        decode.check(cfg, device)
    if b.target == "train_step":  # train.cuda_graph needs CUDA: skipped with that reason, not a crash
        check_train(cfg, torch.device(device))


def _dims(cfg) -> tuple:
    B = cfg.bench.batch_size or (cfg.generate.batch_size if cfg.bench.target == "generate" else cfg.train.batch_size)
    return B, cfg.bench.seq_len or cfg.model.block_size


# -- op-level targets ------------------------------------------------------------------------------
def setup_matmul(ctx: Ctx, data) -> list:
    C, M = ctx.cfg.model.n_embd, ctx.B * ctx.T
    x = torch.randn(M, C, device=ctx.device).to(ctx.dtype)
    w = (torch.randn(4 * C, C, device=ctx.device) * C ** -0.5).to(ctx.dtype)
    tol = ref.tolerance(ctx.dtype_name, ctx.device)
    return [Case("matmul", lambda: F.linear(x, w),
                 lambda: {"matmul_err": ref.expect_close("matmul", F.linear(x, w), x.double() @ w.double().T, tol)},
                 lambda: predict_op(R.matmul_cost(M, 4 * C, C, R.dtype_bytes(ctx.dtype_name)), 1, ctx.device,
                                    ctx.dtype_name, ctx.cal), info={"M": M, "N": 4 * C, "K": C})]


def setup_softmax(ctx: Ctx, data) -> list:
    b, m = ctx.cfg.bench, ctx.cfg.model
    rows, cols = b.rows or ctx.B * m.n_head * ctx.T, b.cols or ctx.T
    softmax = get_softmax(ctx.cfg.attention)
    softmax.check(ctx.device)
    x = (3 * torch.randn(rows, cols, device=ctx.device)).to(ctx.dtype)
    tol = ref.tolerance(ctx.dtype_name, ctx.device)
    return [Case("softmax", lambda: softmax(x),
                 lambda: {"softmax_err": ref.expect_close("softmax", softmax(x), torch.softmax(x.double(), -1), tol)},
                 lambda: predict_op(R.softmax_cost(rows, cols, R.dtype_bytes(ctx.dtype_name)), 1, ctx.device,
                                    ctx.dtype_name, ctx.cal), info={"rows": rows, "cols": cols})]


def setup_attention(ctx: Ctx, data) -> list:
    m = ctx.cfg.model
    attn = get_backend(ctx.cfg.attention.name)(m, ctx.cfg.attention).to(ctx.device).eval()
    B, H, T, D = ctx.B, m.n_head, ctx.T, m.n_embd // m.n_head
    q, k, v = (torch.randn(B, H, T, D, device=ctx.device).to(ctx.dtype).requires_grad_() for _ in range(3))
    dout = torch.randn(B, H, T, D, device=ctx.device).to(ctx.dtype)
    backend = get_backend(ctx.cfg.attention.name)
    s = R.shape_of(m, 1, backend)
    fused, el = backend.fused, R.dtype_bytes(ctx.dtype_name)

    def fwd():
        with torch.no_grad():
            return attn.attend(q, k, v, None)

    def fwd_bwd():
        return torch.autograd.grad(attn.attend(q, k, v, None), (q, k, v), dout)

    def predict(backward):
        cost = R.attention_cost(B, H, T, D, el, fused, backward)
        return predict_op(cost, R.attention_kernels(s, False) * (3 if backward else 1), ctx.device,
                          ctx.dtype_name, ctx.cal, getattr(attn, "allow_tf32", None))  # triton: its own TF32

    verify = lambda bwd: ref.check_attend(attn, B, H, T, D, ctx.dtype, ctx.dtype_name, ctx.device, bwd)  # noqa: E731
    cases = [Case("attention_fwd", fwd, lambda: verify(False), lambda: predict(False))]
    if ctx.cfg.bench.backward:
        cases.append(Case("attention_fwd_bwd", fwd_bwd, lambda: verify(True), lambda: predict(True)))
    return cases


# -- model-level targets ---------------------------------------------------------------------------
def make_trainer(cfg, device, data, job_dir):
    """A Trainer on a fresh model (no checkpoint is ever written by bench/profile)."""
    model = build_model(cfg, data.tokenizer.vocab_size)
    return Trainer(cfg, model, data, device, job_dir / "bench_ckpt.pt", tracker=None)


def setup_forward(ctx: Ctx, data) -> list:
    cfg, V = ctx.cfg, data.tokenizer.vocab_size
    model = build_model(cfg, V).to(ctx.device).eval()
    idx = torch.randint(V, (ctx.B, ctx.T), device=ctx.device)

    def forward():
        return model(idx)[0]

    def eager():
        with torch.no_grad(), autocast(ctx.device, ctx.dtype_name):
            return forward()

    fn, graph_check = eager, lambda: {}
    if cfg.bench.graph:
        fn, graph_check = _capture(forward, eager, ctx)

    def verify():
        return {**ref.check_model_attention(model, ctx.B, ctx.T, ctx.dtype_name, ctx.device),
                **ref.check_logits(model, idx, ctx.dtype_name, ctx.device), **graph_check()}

    # One region name for eager and graph: the report pairs a graph row with its eager baseline by it.
    return [Case("forward", fn, verify,
                 lambda: predict_forward(cfg, V, ctx.device, ctx.B, ctx.T, cfg.bench.graph, ctx.cal),
                 tokens=ctx.B * ctx.T)]


def _capture(forward, eager, ctx: Ctx):
    """One forward captured in a CUDA graph (graphs.capture); replay = one launch."""
    cast = (torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False) if ctx.dtype_name == "bfloat16"
            else torch.autocast("cuda", enabled=False))

    def body():
        with torch.no_grad(), cast:
            return forward()
    captured = capture(body)

    def verify():
        out = captured.replay()
        return {"graph_vs_eager_err": ref.expect_close("graph replay", out.clone(), eager(),
                                                       ref.tolerance(ctx.dtype_name, ctx.device))}
    return captured.replay, verify


def setup_train_step(ctx: Ctx, data) -> list:
    cfg = copy.deepcopy(ctx.cfg)
    cfg.train.batch_size = ctx.B
    job_dir = tracking.current().job_dir
    trainer = make_trainer(cfg, ctx.device, data, job_dir)
    step = [1]

    def fn():
        loss = trainer.train_step(step[0])
        step[0] += 1
        return loss

    def verify():
        return {**ref.check_model_attention(trainer.raw_model, ctx.B, trainer.seq_len, ctx.dtype_name, ctx.device),
                **ref.check_train_step(trainer, data, ctx.dtype_name, ctx.device)}

    def prepare():  # the graphed step is captured here, in training mode, after the gate
        if trainer.graphed is not None:
            trainer.train_step(step[0])
            step[0] += 1

    tokens = ctx.B * trainer.seq_len * cfg.train.grad_accum
    return [Case("train_step", fn, verify, prepare=prepare, predict=
                 lambda: predict_train_step(cfg, data.tokenizer.vocab_size, ctx.device, seq_len=trainer.seq_len,
                                            ceilings=ctx.cal),
                 tokens=tokens, info={"seq_len": trainer.seq_len, "slow_path": cfg.train.slow_path})]


def setup_generate(ctx: Ctx, data) -> list:
    """task=generate's timed generation (decoder_for + decode.timed_generation: weights cast to the
    run's dtype, the Decoder built -- captured, compiled -- before anything is timed) on a
    random model and prompt, after the same parity check against the reference path."""
    from .generate import decoder_for
    cfg, V = ctx.cfg, data.tokenizer.vocab_size
    model = build_model(cfg, V).to(ctx.device)
    prompt_len = max(1, ctx.T // 4)
    new = max(1, ctx.T - prompt_len)
    prompt = torch.randint(V, (ctx.B, prompt_len), device=ctx.device)
    g = cfg.generate
    dec = decoder_for(model, cfg, ctx.B, prompt_len + new, g.temperature, g.top_k)

    def seeded():
        return torch.Generator(device=ctx.device).manual_seed(cfg.seed)

    def verify():
        return {**ref.check_model_attention(model, ctx.B, ctx.T, ctx.dtype_name, ctx.device),
                **parity(model, dec, prompt, new, ctx.dtype_name, seeded)}

    def timer():
        return timed_generation(dec, prompt, seeded, ctx.device, cfg.bench.warmup_ms, cfg.bench.rep_ms)[0]

    gen = seeded()
    return [Case("generate", lambda: dec(prompt, gen), verify,
                 lambda: predict_generate(cfg, V, ctx.device, ctx.B, prompt_len, new, cfg.decode.name, ctx.cal),
                 tokens=ctx.B * new, timer=timer,
                 info={"prompt_len": prompt_len, "new_tokens": new, "decode": cfg.decode.name, "setup_s": dec.setup_s})]


SETUPS = {"matmul": setup_matmul, "softmax": setup_softmax, "attention": setup_attention,
          "forward": setup_forward, "train_step": setup_train_step, "generate": setup_generate}

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
    B, T = _dims(cfg)
    cal = calibration.load(device)
    ctx = Ctx(cfg, device, cfg.train.dtype, torch_dtype(cfg.train.dtype), B, T, cal)
    data = build_data(cfg, device) if cfg.bench.target in MODEL_TARGETS else None
    log.info(f"bench {cfg.bench.target}: B={B} T={T} dtype={cfg.train.dtype} attention={cfg.attention.name} "
          f"device={device}; ceilings for {cal['device_name']}: {cal['source']} ({cal['path']})")
    cases = SETUPS[cfg.bench.target](ctx, data)

    checks = {}
    for case in cases:  # every case is checked before anything is timed
        checks.update(case.verify())
    log.info("correct: " + ", ".join(f"{k}={v:.2e}" if isinstance(v, float) else f"{k}={v}" for k, v in checks.items()))
    preds = {case.name: case.predict() for case in cases}  # the prediction is written down before timing

    metrics, rows = {f"check_{k}": v for k, v in checks.items()}, []
    for case in cases:
        pred = preds[case.name]
        case.prepare()
        stats = case.timer() if case.timer else measure(case.fn, device, cfg.bench.warmup_ms, cfg.bench.rep_ms)
        row = judge(stats, pred, cfg.bench.flag_ratio)
        row.update({k: v for k, v in pred.items() if k.startswith("mem_")}, **case.info,
                   **peak_of_one_call(case.fn, device))
        if case.tokens:
            row["tokens"], row["tok_per_s"] = case.tokens, case.tokens / (stats["median_ms"] / 1e3)
        log.info(flag_line(case.name, row))
        if cfg.bench.profile and device.type == "cuda":  # kernel time per call beside the wall time
            row.update(profile_beside(lambda: [case.fn() for _ in range(PROFILE_CALLS)], PROFILE_CALLS,
                                      stats["median_ms"], "call", tracker, f"{case.name}_kernels"))
        tracker.timing(case.name, row)
        _print_memory(row)
        rows.append([case.name] + [row.get("mem_total") if c == "mem_predicted" else row.get(c) for c in COLUMNS[1:]])
        metrics.update(_flat(case.name, row))
    tracker.table("bench", COLUMNS, rows)
    metrics["flagged"] = any(r[COLUMNS.index("flagged")] for r in rows)
    return metrics


def _flat(name: str, row: dict) -> dict:
    keys = ("median_ms", "predicted_ms", "measured_over_predicted", "flagged", "mfu", "tok_per_s",
            "peak_memory_bytes", "mem_total", "kernel_us", "kernels", "gpu_busy")
    return {f"{name}_{k}": row[k] for k in keys if row.get(k) is not None}


def _print_memory(row: dict) -> None:
    parts = {k[4:]: v for k, v in row.items() if k.startswith("mem_") and k != "mem_total"}
    if parts:
        log.info("  memory predicted " + " + ".join(f"{k} {v / 2**20:.1f}" for k, v in parts.items())
              + f" = {row['mem_total'] / 2**20:.1f} MiB; measured peak {row['peak_memory_bytes'] / 2**20:.1f} MiB "
              f"({row['peak_memory_kind']})")
