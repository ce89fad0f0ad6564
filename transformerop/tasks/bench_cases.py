"""The timed regions of task=bench, one setup per bench.target: each returns Cases -- the
callable that is timed, the float64 check it must pass first, the prediction written down
before it runs -- built on random inputs (never zeros)."""
import copy
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from .. import tracking
from ..decode import timed_generation
from ..decode.parity import parity
from ..graphs import capture
from ..measure import reference as ref
from ..measure import roofline as R
from ..measure.predict import predict_forward, predict_generate, predict_op, predict_train_step
from ..model import build_model, get_backend
from ..model.attention.softmax import get_softmax
from ..runtime import autocast
from ..train import Trainer


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


def dims(cfg) -> tuple:
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
        cost = R.attention_cost(B, H, T, D, el, fused, backward, backend.skips_masked)
        kernels = R.attention_kernels(s, False) * (3 if backward else 1)
        return predict_op(cost, 1 if ctx.cfg.bench.graph else kernels, ctx.device,  # a replay is one launch
                          ctx.dtype_name, ctx.cal, getattr(attn, "allow_tf32", None))  # triton: its own TF32

    def case(name, fn, backward):
        check = lambda: ref.check_attend(attn, B, H, T, D, ctx.dtype, ctx.dtype_name, ctx.device, backward)  # noqa: E731
        if ctx.cfg.bench.graph:
            fn, graph_check = _capture(fn, fn, ctx, name)
            check = lambda c=check: {**c(), **graph_check()}  # noqa: E731
        return Case(name, fn, check, lambda: predict(backward), info={"head_dim": D, "seq_len": T})

    cases = [case("attention_fwd", fwd, False)]
    if ctx.cfg.bench.backward:
        cases.append(case("attention_fwd_bwd", fwd_bwd, True))
    return cases


# -- model-level targets ---------------------------------------------------------------------------
def make_trainer(cfg, device, data, job_dir):
    """A Trainer on a fresh model (no checkpoint is ever written by bench/profile)."""
    model = build_model(cfg, data.tokenizer.vocab_size, device)
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

    cast = (torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False) if ctx.dtype_name == "bfloat16"
            else torch.autocast("cuda", enabled=False))  # a capture may not use autocast's weight-cast cache

    def body():
        with torch.no_grad(), cast:
            return forward()

    fn, graph_check = eager, lambda: {}
    if cfg.bench.graph:
        fn, graph_check = _capture(body, eager, ctx, "forward")

    def verify():
        return {**ref.check_model_attention(model, ctx.B, ctx.T, ctx.dtype_name, ctx.device),
                **ref.check_logits(model, idx, ctx.dtype_name, ctx.device), **graph_check()}

    # One region name for eager and graph: the report pairs a graph row with its eager baseline by it.
    return [Case("forward", fn, verify,
                 lambda: predict_forward(cfg, V, ctx.device, ctx.B, ctx.T, cfg.bench.graph, ctx.cal),
                 tokens=ctx.B * ctx.T)]


def _capture(body, eager, ctx: Ctx, name: str):
    """body() captured in a CUDA graph (graphs.capture); replay = one launch. Its check: the
    replay's outputs equal eager()'s (a capture that recorded the wrong buffers fails here)."""
    captured = capture(body)

    def verify():
        out, want = captured.replay(), eager()
        outs, wants = (o if isinstance(o, (tuple, list)) else (o,) for o in (out, want))
        tol = ref.tolerance(ctx.dtype_name, ctx.device)
        return {f"{name}_graph_vs_eager_err": max(ref.expect_close(f"{name} graph replay", o.clone(), w, tol)
                                                   for o, w in zip(outs, wants))}
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
