"""Predictions, written before anything is timed: roofline (compute or memory bound) plus the
launch term, for the train step and for every bench target, with the ceilings used and their
source (measured by task=calibrate, or a labelled datasheet/guess fallback). Then `judge` puts a
measurement beside its prediction: ratio, flag, achieved FLOP/s and MFU against that same peak.

    pred = predict_train_step(cfg, vocab_size, device, seq_len=trainer.seq_len)
    row = judge(measure(step, device), pred, cfg.bench.flag_ratio)   # or compare(ms, pred_ms, 3.0)
"""
import torch

from . import calibration
from . import roofline as R


def price(flops: float, bytes_: float, kernels: float, device, dtype_name: str, cal: dict,
           launch_key: str, tf32: bool | None = None) -> dict:
    """Turn work (FLOPs, bytes, kernel launches) into a predicted time on this device. launch_key
    picks the per-kernel host cost: op_train_us (train step), op_infer_us (eager inference),
    graph_node_us (CUDA-graph replay), launch_us (one bare op)."""
    device = torch.device(device)
    peak_key = calibration.flops_key(dtype_name, device, tf32)
    peak, peak_src = calibration.value(cal, peak_key)
    bw, bw_src = calibration.value(cal, "bandwidth")
    per_launch, launch_src = calibration.value(cal, launch_key)
    roof = R.roofline_ms(flops, bytes_, peak, bw)
    launch = R.launch_ms(kernels, per_launch)
    overlapped = device.type == "cuda"
    predicted = R.combine_ms(roof["bound_ms"], launch, overlapped)
    bound = "launch" if launch > roof["bound_ms"] else roof["bound"]
    return {"predicted_ms": predicted, "compute_ms": roof["compute_ms"], "memory_ms": roof["memory_ms"],
            "launch_ms": launch, "bound": bound, "flops": flops, "bytes": bytes_,
            "intensity": R.arithmetic_intensity(flops, bytes_), "kernels": kernels,
            "peak_flops": peak, "peak_key": peak_key, "peak_source": peak_src,
            "bandwidth": bw, "bandwidth_source": bw_src, "launch_us": per_launch,
            "launch_key": launch_key, "launch_source": launch_src,
            "ceilings": cal["source"], "ceilings_device": cal["device_name"]}


def _shape(cfg, vocab_size: int) -> R.GPTShape:
    from ..model import get_backend
    return R.shape_of(cfg.model, vocab_size, get_backend(cfg.attention.name))


def _memory(**parts) -> dict:
    mem = {f"mem_{k}": int(v) for k, v in parts.items()}
    mem["mem_total"] = sum(mem.values())
    return mem


def predict_train_step(cfg, vocab_size: int, device, seq_len: int | None = None,
                       batch_size: int | None = None, ceilings: dict | None = None) -> dict:
    """One optimizer step of cfg.train (grad_accum micro-batches of batch_size x seq_len tokens).
    seq_len defaults to model.block_size; pass the data's real length (Trainer.seq_len: 8 for
    two-digit addition). Returns predicted_ms and its parts, flops (the MFU basis: achieved =
    flops / measured time), peak_flops with its source, and mem_* bytes (weights, grads,
    optimizer, activations, total)."""
    device = torch.device(device)
    cal = ceilings or calibration.load(device)
    s, t = _shape(cfg, vocab_size), cfg.train
    T = seq_len or cfg.model.block_size
    B = batch_size or t.batch_size
    el = R.dtype_bytes(t.dtype)
    tokens = B * T * t.grad_accum
    flops = tokens * R.flops_per_token(s, T)["train"]
    bytes_ = R.train_step_bytes(s, tokens, T, el)
    kernels = R.kernels_per_train_step(s, bf16=t.dtype == "bfloat16", fused_optimizer=device.type == "cuda",
                                       grad_clip=t.grad_clip > 0, micro_steps=t.grad_accum)
    graphed = bool(t.cuda_graph) and device.type == "cuda"  # one replay: each kernel costs a graph node
    pred = price(flops, bytes_, kernels, device, t.dtype, cal, "graph_node_us" if graphed else "op_train_us")
    p = R.param_memory(s)
    act = B * T * R.activation_bytes_per_token(s, T, el, training=True)
    return {**pred, "tokens": tokens, "params": R.param_count(s),
            **_memory(weights=p["weights"], grads=p["grads"], optimizer=p["optimizer"], activations=act)}


def predict_forward(cfg, vocab_size: int, device, batch: int, seq_len: int, graph: bool = False,
                    ceilings: dict | None = None) -> dict:
    """One inference forward (no grad, no loss) of batch x seq_len tokens; graph=True prices
    each kernel at the CUDA-graph node cost instead of an eager launch."""
    device = torch.device(device)
    cal = ceilings or calibration.load(device)
    s, dt = _shape(cfg, vocab_size), cfg.train.dtype
    el = R.dtype_bytes(dt)
    tokens = batch * seq_len
    flops = tokens * R.flops_per_token(s, seq_len)["forward"]
    kernels = R.kernels_per_forward(s, bf16=dt == "bfloat16")
    pred = price(flops, R.forward_bytes(s, tokens, seq_len, el), kernels, device, dt, cal,
                  "graph_node_us" if graph else "op_infer_us")
    live = tokens * R.inference_live_bytes_per_token(s, seq_len, el)
    return {**pred, "tokens": tokens, **_memory(weights=R.param_memory(s)["weights"], activations=live)}


def predict_generate(cfg, vocab_size: int, device, batch: int, prompt_len: int, new_tokens: int,
                     path: str, ceilings: dict | None = None) -> dict:
    """new_tokens decode steps after a prompt. A cached path: a prefill of the prompt, then one
    token per step against the KV cache; otherwise every step reruns the whole context. The path
    declares its kernels per token and what prices them (graph nodes when it replays a graph)."""
    from ..decode import get_path
    device = torch.device(device)
    cal = ceilings or calibration.load(device)
    s, dt = _shape(cfg, vocab_size), cfg.train.dtype
    el = R.dtype_bytes(dt)
    p = get_path(path)
    cached = p.cached
    steps = [R.decode_token_cost(s, batch, min(prompt_len + i, s.block_size), el, cached=cached and i > 0)
             for i in range(new_tokens)]
    if cached:  # step 0 is the prefill: the prompt's tokens at their own context length
        steps[0] = {"flops": batch * prompt_len * R.flops_per_token(s, prompt_len)["forward"],
                    "bytes": R.forward_bytes(s, batch * prompt_len, prompt_len, el)}
    flops, bytes_ = sum(x["flops"] for x in steps), sum(x["bytes"] for x in steps)
    kernels = new_tokens * p.kernels_per_token(s, dt == "bfloat16")
    pred = price(flops, bytes_, kernels, device, dt, cal, p.launch_key(device))
    kv = R.kv_cache_bytes(s, batch, min(prompt_len + new_tokens, s.block_size), el) if cached else 0
    live = batch * (prompt_len + new_tokens) * R.inference_live_bytes_per_token(s, prompt_len + new_tokens, el)
    return {**pred, "tokens": batch * new_tokens,
            **_memory(weights=R.param_memory(s)["weights"], kv_cache=kv, activations=live)}


def predict_op(cost: dict, kernels: int, device, dtype_name: str, ceilings: dict | None = None,
               tf32: bool | None = None) -> dict:
    """An op-level target (matmul, softmax, attention) from its roofline cost dict."""
    cal = ceilings or calibration.load(device)
    return price(cost["flops"], cost["bytes"], kernels, device, dtype_name, cal, "launch_us", tf32)


def compare(measured_ms: float, predicted_ms: float, threshold: float) -> dict:
    """measured/predicted, flagged when beyond threshold either way (slower than the napkin by
    more than `threshold`x, or faster than it by as much: then the napkin itself is wrong)."""
    ratio = measured_ms / predicted_ms if predicted_ms > 0 else float("inf")
    return {"measured_over_predicted": ratio, "flagged": bool(ratio > threshold or ratio < 1.0 / threshold)}


def judge(stats: dict, pred: dict, threshold: float) -> dict:
    """One timing row: measure()'s stats, the prediction, ratio + flag, achieved FLOP/s and MFU
    against the peak the prediction used (measured when calibrated)."""
    ms = stats["median_ms"]
    row = {**stats, **{k: v for k, v in pred.items() if not k.startswith("mem_")},
           **compare(ms, pred["predicted_ms"], threshold), "flag_ratio": threshold}
    row["achieved_flops"] = pred["flops"] / (ms / 1e3) if ms > 0 else 0.0
    row["mfu"] = row["achieved_flops"] / pred["peak_flops"] if pred.get("peak_flops") else None
    return row


def flag_line(name: str, row: dict) -> str:
    verdict = "FLAGGED" if row["flagged"] else "ok"
    return (f"[{verdict}] {name}: measured {row['median_ms']:.3f} ms vs predicted {row['predicted_ms']:.3f} ms "
            f"({row['bound']}-bound) -> measured/predicted {row['measured_over_predicted']:.2f} "
            f"(flag beyond {row['flag_ratio']:g}x either way); MFU {row['mfu'] or 0:.1%} of "
            f"{row['peak_flops'] / 1e12:.3g} TFLOP/s ({row['peak_key']}, {row['peak_source']})")
