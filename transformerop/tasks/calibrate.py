"""task=calibrate: measure this machine's ceilings once and cache them (measure/calibration.py).

- matmul FLOP/s per dtype: one big random square matmul (fp32 with TF32 off, fp32 with TF32 on,
  bf16); CUDA n=8192, CPU n=1024 (bf16 n=512: emulated, slow). Checked against float64 first.
- copy bandwidth: dst.copy_(src) of 1 GiB (CUDA) / 64 MiB (CPU); bytes = read + write.
- per-kernel launch cost: LAUNCH_OPS tiny in-place adds per call, eager; and the same ops captured
  in one CUDA graph and replayed (per node). On a GPU the eager number is the host's issue rate.
- per-kernel host cost in model code (op_train_us, op_infer_us): a GPT so small (2 x 32 wide,
  1 x 8 tokens) that its device work is negligible, timed per Trainer.train_step and per eager
  no-grad forward, divided by the napkin's kernel count for it. Module dispatch, autocast,
  autograd and the optimizer make this several times the bare launch (H200: 8 us bare, ~20-40 us
  in model code); host-bound predictions use it.
Each measurement is written down beside what the fallback (datasheet/typical/guess) predicted.
CPU: TF32 and CUDA graphs do not exist; they are marked n/a and keep their labelled fallbacks.
"""
import copy
import logging

import torch

from .. import tracking
from ..data import build_data
from ..graphs import capture
from ..measure import calibration
from ..measure import roofline as R
from ..measure.predict import compare
from ..measure.reference import Mismatch, expect_close
from ..measure.timing import measure
from ..model import REFERENCE, get_backend
from ..runtime import pick_device, seed_everything

log = logging.getLogger(__name__)

LAUNCH_OPS = 1000
TINY_GPT = {"name": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 8, "dropout": 0.0, "bias": True}


def _matmul(device, dtype, tf32: bool):
    cuda = device.type == "cuda"
    n = 8192 if cuda else (512 if dtype == torch.bfloat16 else 1024)
    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        tol = 3e-2 if dtype == torch.bfloat16 or tf32 else 1e-4
        expect_close("calibration matmul", (a[:64] @ b).float(), a[:64].double() @ b.double(), tol)
        stats = measure(lambda: a @ b, device)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return 2 * n ** 3, stats, f"{n}x{n} @ {n}x{n} {str(dtype).replace('torch.', '')}" + (" TF32" if tf32 else "")


def _copy(device):
    n = (1 << 28) if device.type == "cuda" else (1 << 24)  # float32 elements: 1 GiB / 64 MiB
    src, dst = torch.randn(n, device=device), torch.empty(n, device=device)
    dst.copy_(src)
    if not torch.equal(dst, src):
        raise Mismatch("calibration copy: dst != src")
    return 2 * 4 * n, measure(lambda: dst.copy_(src), device), f"copy_ of {4 * n / 2**20:.0f} MiB (read + write)"


def _tiny_ops(x):
    for _ in range(LAUNCH_OPS):
        x.add_(1e-3)


def _launch(device):
    x = torch.randn(1, device=device)
    return measure(lambda: _tiny_ops(x), device), f"{LAUNCH_OPS} eager add_ on 1 element per call"


def _graph_launch(device):
    x = torch.randn(1, device=device)
    captured = capture(lambda: _tiny_ops(x), warmup=1)
    return measure(captured.replay, device), f"one CUDA graph of {LAUNCH_OPS} add_ nodes per replay"


def _model_ops(cfg, device, job_dir):
    """Host cost per kernel of a tiny GPT's train step and eager forward (fp32, sdpa, addition
    data, batch 1): the device work is negligible, so the time is the host's, kernel by kernel."""
    from .bench import make_trainer  # a Trainer on a fresh model, as bench and profile build it
    tiny = copy.deepcopy(cfg)
    for key, value in TINY_GPT.items():
        setattr(tiny.model, key, value)
    tiny.attention.name, tiny.data.name = REFERENCE, "addition"
    t = tiny.train
    t.batch_size, t.grad_accum, t.dtype, t.slow_path, t.compile = 1, 1, "float32", "none", False
    data = build_data(tiny, device)
    trainer = make_trainer(tiny, device, data, job_dir)
    s = R.shape_of(tiny.model, data.tokenizer.vocab_size, get_backend(tiny.attention.name))
    x, _ = data.batch("train", 1, torch.Generator(device=device).manual_seed(0))

    def forward():
        with torch.no_grad():
            return trainer.raw_model(x)
    k_train = R.kernels_per_train_step(s, fused_optimizer=device.type == "cuda", grad_clip=t.grad_clip > 0)
    k_infer = R.kernels_per_forward(s)
    how = f"tiny GPT (L2 C32, 1x{x.size(1)} tokens) {{}} / {{}} estimated kernels"
    return [("op_train_us", k_train, measure(lambda: trainer.train_step(1), device), how.format("train step", k_train)),
            ("op_infer_us", k_infer, measure(forward, device), how.format("eager forward", k_infer))]


def run(cfg) -> dict:
    tracker = tracking.current()
    device = pick_device(cfg.device)
    seed_everything(cfg.seed)
    fallback = calibration.fallback(device)
    log.info(f"calibrating {calibration.device_name(device)} -> {calibration.cache_path(device)}")
    # (key, work per call, stats, how, unit scale): value = work / seconds, or seconds per op in us
    results = []
    cuda = device.type == "cuda"
    for key, dtype, tf32 in (("flops_fp32", torch.float32, False), ("flops_tf32", torch.float32, True),
                             ("flops_bf16", torch.bfloat16, False)):
        if key == "flops_tf32" and not cuda:
            log.info("flops_tf32: n/a on cpu (no TF32); keeps its labelled fallback")
            continue
        work, stats, how = _matmul(device, dtype, tf32)
        results.append((key, work, stats, how))
    results.append(("bandwidth", *_copy(device)))
    results.append(("launch_us", LAUNCH_OPS, *_launch(device)))
    if cuda:
        results.append(("graph_node_us", LAUNCH_OPS, *_graph_launch(device)))
    else:
        log.info("graph_node_us: n/a on cpu (no CUDA graphs)")
    results += _model_ops(cfg, device, tracker.job_dir)

    measured, metrics, rows = {}, {}, []
    for key, work, stats, how in results:
        s = stats["median_ms"] / 1e3
        per_op = key.endswith("_us")
        value = s / work * 1e6 if per_op else work / s
        fb = fallback.get(key, {}).get("value")
        predicted_ms = (fb * work / 1e3) if per_op else (1e3 * work / fb)  # what the fallback said
        row = {**stats, "value": value, "unit": calibration.UNITS[key], "how": how, "fallback": fb,
               "fallback_source": fallback.get(key, {}).get("source"), "predicted_ms": predicted_ms,
               **compare(stats["median_ms"], predicted_ms, cfg.bench.flag_ratio)}
        tracker.timing(f"calibrate_{key}", row)
        measured[key] = (value, how)
        metrics[key] = value
        rows.append([key, value, calibration.UNITS[key], fb, row["fallback_source"],
                     row["measured_over_predicted"], stats["repeats"], how])
    path = calibration.save(device, measured)
    tracker.table("calibration", ["ceiling", "measured", "unit", "fallback", "fallback_source",
                                  "time_measured_over_fallback", "repeats", "how"], rows)
    _print(rows, path)
    return {**metrics, "cache_path": str(path), "device_name": calibration.device_name(device)}


def _fmt(v, unit) -> str:
    if v is None:
        return "-"
    if unit == "FLOP/s":
        return f"{v / 1e12:.3g} TFLOP/s"
    if unit == "B/s":
        return f"{v / 1e9:.4g} GB/s"
    return f"{v:.3g} us"


def _print(rows, path) -> None:
    log.info(f"\n{'ceiling':<14} {'measured':>16} {'fallback':>16} {'source':>10}  how")
    for key, value, unit, fb, src, _, _, how in rows:
        log.info(f"{key:<14} {_fmt(value, unit):>16} {_fmt(fb, unit):>16} {src or '-':>10}  {how}")
    log.info(f"cached in {path} (source: measured)")
