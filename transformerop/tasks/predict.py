"""task=predict: the napkin table for the configured model, no GPU needed -- a CPU-only user
can plan a run. Columns: this machine (calibrated ceilings when task=calibrate has cached them,
else the labelled fallback) and every GPU in the datasheet table. Rows: parameters and memory,
FLOPs and bytes per train step, roofline and launch-bound times, one decode token."""
import logging

import torch

from ..data import build_data
from ..measure import calibration
from ..measure import roofline as R
from ..measure.predict import predict_train_step, price
from ..model import get_backend
from ..runtime import pick_device

log = logging.getLogger(__name__)


def _decode_token(s, cal, device, dtype_name) -> dict:
    """One cached decode token, batch 1, at a full context: memory-bound unless launch-bound."""
    cost = R.decode_token_cost(s, 1, s.block_size, R.dtype_bytes(dtype_name), cached=True)
    p = price(cost["flops"], cost["bytes"], R.kernels_per_decode_token(s, bf16=dtype_name == "bfloat16"), device,
              dtype_name, cal, "op_infer_us")
    return {"ms": p["predicted_ms"], "bound": p["bound"], "roofline_ms": max(p["compute_ms"], p["memory_ms"])}


def run(cfg) -> dict:
    local = pick_device(cfg.device)
    data = build_data(cfg, torch.device("cpu"))  # only for the vocabulary and the sequence length
    V = data.tokenizer.vocab_size
    T = data.batch("train", 1, torch.Generator().manual_seed(0))[0].size(1)
    s = R.shape_of(cfg.model, V, get_backend(cfg.attention.name))
    t, el = cfg.train, R.dtype_bytes(cfg.train.dtype)
    B = t.batch_size

    columns = [(f"this machine ({calibration.device_name(local)})", local, calibration.load(local))]
    columns += [(f"{part} (datasheet)", torch.device("cuda"), calibration.datasheet(part))
                for part in calibration.DATASHEET]
    preds = [(name, dev, cal, predict_train_step(cfg, V, dev, seq_len=T, ceilings=cal),
              _decode_token(s, cal, dev, t.dtype)) for name, dev, cal in columns]

    fpt = R.flops_per_token(s, T)
    p0 = preds[0][3]
    mem = R.param_memory(s)
    log.info(f"\n== napkin: model={cfg.model.name} L={s.n_layer} H={s.n_head} C={s.n_embd} V={V} block={s.block_size} "
          f"attention={cfg.attention.name} | train B={B} x T={T} x accum {t.grad_accum}, dtype={t.dtype} ==")
    log.info("conventions: 2 FLOPs/MAC; train = 3 x forward = 6 N_mm + 12 L T C; "
             "fp32 weights + grads + AdamW = 16 B/param")
    model_rows = [
        ("parameters", f"{R.param_count(s):,}"), ("matmul parameters N_mm", f"{R.matmul_params(s):,}"),
        ("weights / grads / AdamW", f"{_mib(mem['weights'])} / {_mib(mem['grads'])} / {_mib(mem['optimizer'])}"),
        ("activations per token (train)", f"{R.activation_bytes_per_token(s, T, el):,} B"),
        ("activations per step", _mib(p0["mem_activations"])),
        ("predicted memory per step", _mib(p0["mem_total"])),
        (f"KV cache B={B} T={s.block_size}", _mib(R.kv_cache_bytes(s, B, s.block_size, el))),
        ("FLOPs/token forward (matmul + attention)", f"{fpt['forward']:,} ({fpt['matmul']:,} + {fpt['attention']:,})"),
        ("FLOPs/token train (attention part)", f"{fpt['train']:,} ({fpt['train_attention']:,})"),
        ("FLOPs per step", f"{p0['flops']:.4g}"), ("bytes per step", f"{p0['bytes']:.4g}"),
        ("arithmetic intensity", f"{p0['intensity']:.1f} FLOP/B"),
        ("kernels per step (eager, estimate)", f"{p0['kernels']:,}"),
    ]
    for name, value in model_rows:
        log.info(f"  {name:<42} {value}")

    width = max(len(c[0]) for c in columns) + 2
    log.info(f"\n  {'per device':<32}" + "".join(f"{name:>{width}}" for name, *_ in columns))
    device_rows = [
        ("ceilings source", lambda p, d, c: c["source"]),
        ("peak used (TFLOP/s)", lambda p, d, c: f"{p['peak_flops'] / 1e12:.3g} {p['peak_key'][6:]}"),
        ("bandwidth (GB/s)", lambda p, d, c: f"{p['bandwidth'] / 1e9:.4g}"),
        ("ridge point (FLOP/B)", lambda p, d, c: f"{p['peak_flops'] / p['bandwidth']:.0f}"),
        ("compute / memory / launch ms",
         lambda p, d, c: f"{p['compute_ms']:.3g}/{p['memory_ms']:.3g}/{p['launch_ms']:.3g}"),
        ("predicted step ms (bound)", lambda p, d, c: f"{p['predicted_ms']:.3g} ({p['bound']})"),
        ("predicted tok/s", lambda p, d, c: f"{p['tokens'] / p['predicted_ms'] * 1e3:,.0f}"),
        ("decode token ms, B=1, full ctx", lambda p, d, c: f"{d['ms']:.3g} ({d['bound']})"),
    ]
    for label, cell in device_rows:
        log.info(f"  {label:<32}" + "".join(f"{cell(p, d, c):>{width}}" for _, _, c, p, d in preds))

    metrics = {"params": R.param_count(s), "matmul_params": R.matmul_params(s), "tokens_per_step": p0["tokens"],
               "flops_per_step": p0["flops"], "bytes_per_step": p0["bytes"], "intensity": p0["intensity"],
               "kernels_per_step": p0["kernels"], "predicted_step_ms": p0["predicted_ms"], "bound": p0["bound"],
               "ceilings_source": p0["ceilings"], "decode_token_ms": preds[0][4]["ms"],
               **{k: v for k, v in p0.items() if k.startswith("mem_")}}
    for _, _, cal, p, d in preds[1:]:
        part = cal["device_name"].lower()
        metrics[f"{part}_step_ms"], metrics[f"{part}_decode_token_ms"] = p["predicted_ms"], d["ms"]
    return metrics


def _mib(b) -> str:
    return f"{b / 2**20:.2f} MiB"
