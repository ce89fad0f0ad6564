"""Measurement: napkin math against hand-worked values, the timing wrapper, bench / calibrate /
predict / profile jobs on CPU, the flag on a planted slow path, a wrong kernel failing the job.

CPU timings here run single-threaded: on a shared 2-core box, two intra-op threads stall at every
OpenMP barrier when a neighbour takes a core (17 ms steps took 1 s), one thread does not. The flag
test also times with process CPU time (TRANSFORMEROP_CPU_CLOCK=process): neighbours swung wall
time 10-20x within seconds there, CPU time they do not.
`pytest -m gpu` runs the CUDA tests on the device."""
import dataclasses
import logging
import math
import time

import pytest
import torch
from conftest import ROOT, make_cfg, run_cli
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict

from transformerop.jobs import run_job
from transformerop.measure import calibration
from transformerop.measure import roofline as R
from transformerop.measure.predict import compare, predict_train_step
from transformerop.measure.timing import measure
from transformerop.model import build_model, count_params, get_backend
from transformerop.tracking import read_results

CPU = torch.device("cpu")
ADD = R.GPTShape(n_layer=2, n_head=4, n_embd=64, block_size=16, vocab_size=12)  # the addition GPT, sdpa
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run `pytest -m gpu` on the device)")


@pytest.fixture
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def cal_dir(tmp_path, monkeypatch):
    """A private calibration cache: tests never read or write the user's."""
    d = tmp_path / "calibration"
    monkeypatch.setenv("TRANSFORMEROP_CALIBRATION_DIR", str(d))
    return d


def run_in_process(job_dir, *overrides):
    """One job exactly as run.py runs it, in this process (so a test can monkeypatch a kernel).
    Returns (results.json, exit code or None)."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["logger=none", *overrides], return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(job_dir)
    HydraConfig.instance().set_config(cfg)
    task_cfg = cfg.copy()
    with open_dict(task_cfg):
        del task_cfg["hydra"]
    job_dir.mkdir(parents=True, exist_ok=True)
    code = None
    try:
        run_job(task_cfg)
    except SystemExit as e:
        code = e.code
    return read_results(job_dir), code


# -- napkin math, worked by hand -----------------------------------------------------------------
def test_param_count_by_hand_and_equals_the_model():
    # Addition GPT, C=64, L=2, V=12, block 16, bias:
    #   wte 12*64 = 768; wpe 16*64 = 1,024
    #   per layer: 12*64^2 = 49,152 weights; biases qkv 192 + proj 64 + fc 256 + mlp-proj 64 = 576;
    #              2 LayerNorms x (64 + 64) = 256  ->  49,984;  x 2 layers = 99,968
    #   ln_f 128; LM head tied (0)  ->  768 + 1,024 + 99,968 + 128 = 101,888
    assert R.param_count(ADD) == 101_888
    # Seed GPT, C=384, L=6, V=65, block 256: 24,960 + 98,304 + 6 * (1,769,472 + 13*384) + 768 = 10,770,816
    assert R.param_count(R.GPTShape(6, 6, 384, 256, 65)) == 10_770_816
    for overrides in ([], ["model.bias=false"], ["attention=naive_loop"], ["model=gpt"], ["model=bigram"]):
        cfg = make_cfg(*overrides)
        s = R.shape_of(cfg.model, 65, get_backend(cfg.attention.name))
        model = build_model(cfg, 65)
        assert R.param_count(s) == count_params(model), overrides
        assert R.param_tensors(s) == len(list(model.parameters())), overrides


def test_memory_flops_bytes_by_hand():
    # fp32 weights 4 B + grads 4 B + AdamW m, v 8 B per parameter: 101,888 * 16 = 1,630,208
    assert R.param_memory(ADD) == {"weights": 407_552, "grads": 407_552, "optimizer": 815_104, "total": 1_630_208}
    # N_mm = 12 * 2 * 64^2 + 12 * 64 = 98,304 + 768 = 99,072
    assert R.matmul_params(ADD) == 99_072
    # T=8: matmul 2 * 99,072 = 198,144; attention 4 * L * T * C = 4*2*8*64 = 4,096;
    # forward 202,240; train 3x = 606,720 (attention part 12,288)
    assert R.flops_per_token(ADD, 8) == {"matmul": 198_144, "attention": 4_096, "forward": 202_240,
                                         "train": 606_720, "train_attention": 12_288}
    # a kernel that skips the masked scores: a causal pass of 8 tokens sees (8+1)/2 keys per query on
    # average, 2 * L * (T+1) * C = 2*2*9*64 = 2,304; one decode query still sees all 8 keys
    skip = dataclasses.replace(ADD, causal_skip=True)
    assert R.flops_per_token(skip, 8)["attention"] == 2_304
    assert R.flops_per_token(skip, 8, causal_pass=False)["attention"] == 4_096
    # the op alone, B 2, H 4, T 8, D 16: full 4*B*H*T*T*D = 32,768; skipping 2*B*H*T*(T+1)*D = 18,432
    assert R.attention_cost(2, 4, 8, 16, 2, True)["flops"] == 32_768
    assert R.attention_cost(2, 4, 8, 16, 2, True, causal_skip=True)["flops"] == 18_432
    assert R.shape_of(make_cfg().model, 12, get_backend("sdpa")).causal_skip
    assert not R.shape_of(make_cfg().model, 12, get_backend("naive")).causal_skip
    # activations, T=8, fp32, sdpa, no dropout: per layer 17 * 64 * 4 = 4,352, x 2 = 8,704;
    # model: ln_f + head inputs 2 * 64 * 4 = 512, logits V * (4 + 4) = 96  ->  9,312 B per token
    assert R.activation_bytes_per_token(ADD, 8, 4) == 9_312
    # naive keeps the softmax output (H*T = 32 per token): (16*64 + 32) * 4 = 4,224 per layer -> 8,448 + 608
    naive = R.shape_of(make_cfg("attention=naive").model, 12, get_backend("naive"))  # the backend declares its kernels
    assert R.activation_bytes_per_token(naive, 8, 4) == 9_056
    # + dropout 0.1: per layer (1,024 + 2*32) * 4 + masks (2*64 + 32) = 4,352 + 160 = 4,512 -> 9,024;
    # model 512 + 96 + embedding mask 64 = 672  ->  9,696
    drop = R.shape_of(make_cfg("attention=naive", "model.dropout=0.1").model, 12, get_backend("naive"))
    assert R.activation_bytes_per_token(drop, 8, 4) == 9_696
    # KV cache: 2 (K, V) * L 2 * B 3 * T 16 * C 64 * 2 B (bf16) = 24,576
    assert R.kv_cache_bytes(ADD, 3, 16, 2) == 24_576
    # train step, B=128 x T=8 = 1,024 tokens: 52 B * 101,888 + 4 * 1,024 * 9,312 = 5,298,176 + 38,141,952
    assert R.train_step_bytes(ADD, 1024, 8, 4) == 43_440_128
    # 1024^3 matmul fp32: 2 * 1024^3 FLOPs over 3 * 1024^2 * 4 B -> 2048 / 12 = 170.67 FLOP/B
    mm = R.matmul_cost(1024, 1024, 1024, 4)
    assert mm == {"flops": 2 * 1024 ** 3, "bytes": 12_582_912}
    assert R.arithmetic_intensity(mm["flops"], mm["bytes"]) == pytest.approx(2048 / 12)


def test_time_bounds_launch_term_and_amdahl_by_hand():
    # 2e12 FLOPs at 1e14 FLOP/s = 20 ms; 1e9 B at 1e12 B/s = 1 ms -> compute-bound, 20 ms
    assert R.roofline_ms(2e12, 1e9, 1e14, 1e12) == {"compute_ms": 20.0, "memory_ms": 1.0, "bound_ms": 20.0,
                                                    "bound": "compute"}
    assert R.launch_ms(436, 10.0) == pytest.approx(4.36)  # 436 kernels x 10 us
    assert R.combine_ms(20.0, 4.36, overlapped=True) == 20.0  # GPU: host queues ahead of the device
    assert R.combine_ms(20.0, 4.36, overlapped=False) == pytest.approx(24.36)  # CPU: they add up
    assert R.amdahl(0.5, 2.0) == pytest.approx(4 / 3)  # 1 / (0.5 + 0.5/2)
    assert R.amdahl(0.25, float("inf")) == pytest.approx(4 / 3)  # at most 1 / (1 - 0.25)
    assert R.amdahl(0.2, 3.6) == pytest.approx(1 / (0.8 + 0.2 / 3.6))  # "attention 3.6x" at 20%: 1.17x
    # kernels, eval forward, fp32, sdpa: per layer 10 + 1 attention = 11, x 2 = 22; model 4 + ln_f + head = 6
    assert R.kernels_per_forward(ADD) == 28
    assert R.kernels_per_forward(R.shape_of(make_cfg("attention=naive").model, 12, get_backend("naive"))) == 2 * 21 + 6
    # train step: forward with loss 30; batch 4 + forward 30 + backward 3 * 30 = 124;
    # CPU (per-tensor AdamW), 28 tensors: AdamW 9 * 28 = 252, clipping 2 * 28 + 4 = 60  ->  436.
    # Fused (CUDA): 124 + 10 = 134. Seed GPT fp32 (dropout on): forward 6 * 13 + 7 + 2 = 87 ->
    # 4 + 4 * 87 + 10 = 362 (the H200 profiler counted 361 device ops per step)
    assert R.kernels_per_train_step(ADD, fused_optimizer=False) == 436
    assert R.kernels_per_train_step(ADD, fused_optimizer=True) == 134
    assert R.kernels_per_train_step(R.GPTShape(6, 6, 384, 256, 65, dropout=0.2)) == 362
    # bf16: forward 6 * 19 + 9 + 3 = 126 -> 4 + 504 + 10 = 518. Bias-free: 6 layers x (4 bias
    # reductions + 4 bias casts) fewer = 470. fused_norm: per layer 2 kernels for the two
    # (dropout +) add + LayerNorm, not 6, and no input casts: forward 6 * 13 + 8 + 3 = 89 ->
    # 4 + 356 + 10 = 370; bias-free 322.
    seed = dict(n_layer=6, n_head=6, n_embd=384, block_size=256, vocab_size=65, dropout=0.2)
    for bias, fused, want in ((True, False, 518), (False, False, 470), (True, True, 370), (False, True, 322)):
        assert R.kernels_per_train_step(R.GPTShape(**seed, bias=bias, fused_norm=fused), bf16=True) == want
    assert R.shape_of(make_cfg("model=gpt", "model.fused_norm=true").model, 65).fused_norm
    # decoding: only the cache-free path runs the fused blocks (bf16 eval forward: 4 fewer kernels a
    # layer -- 2 for the adds and norms, no input casts -- and the head's input cast: 25)
    from transformerop.decode import get_path
    plain, fused = R.GPTShape(**seed), R.GPTShape(**seed, fused_norm=True)
    assert get_path("recompute").kernels_per_token(fused, True) == get_path("recompute").kernels_per_token(plain, True) - 25
    assert get_path("kv_cache").kernels_per_token(fused, True) == get_path("kv_cache").kernels_per_token(plain, True)


def test_predict_train_step_by_hand_and_compare():
    cfg = make_cfg("train.batch_size=128")
    cal = {"device_name": "test", "source": "test", "ceilings": {
        "flops_fp32": {"value": 1e11, "source": "test"}, "bandwidth": {"value": 1e10, "source": "test"},
        "op_train_us": {"value": 10.0, "source": "test"}}}
    p = predict_train_step(cfg, 12, CPU, seq_len=8, ceilings=cal)
    # SDPA skips the masked scores: attention 2 * L * (T+1) * C = 2*2*9*64 = 2,304 per token, forward
    # 198,144 + 2,304 = 200,448, train 3x = 601,344; 1,024 tokens * 601,344 = 615,776,256 FLOPs / 1e11
    # = 6.1578 ms; 43,440,128 B / 1e10 = 4.344 ms; launch 436 * 10 us = 4.36 ms; CPU adds: 10.5177626 ms
    assert p["flops"] == 615_776_256 and p["bytes"] == 43_440_128 and p["kernels"] == 436
    assert p["predicted_ms"] == pytest.approx(10.51776256)
    assert p["bound"] == "compute" and p["peak_source"] == "test"
    # memory: 1,630,208 (params) + 1,024 * 9,312 activations = 11,165,696
    assert p["mem_total"] == 1_630_208 + 1024 * 9_312
    # a CUDA-graphed step pays a graph node per kernel, not an eager launch
    cal["ceilings"].update(graph_node_us={"value": 1.0, "source": "test"}, flops_tf32={"value": 1e11, "source": "t"},
                           flops_fp32_cuda={"value": 1e11, "source": "t"})
    g = predict_train_step(make_cfg("train.batch_size=128", "train.cuda_graph=true"), 12, torch.device("cuda"),
                           seq_len=8, ceilings=cal)
    assert g["launch_key"] == "graph_node_us" and g["launch_ms"] == pytest.approx(g["kernels"] * 1e-3)
    assert compare(30.0, 10.0, 3.0) == {"measured_over_predicted": 3.0, "flagged": False}
    assert compare(31.0, 10.0, 3.0)["flagged"] and compare(3.2, 10.0, 3.0)["flagged"]  # too slow / too fast


def test_timing_wrapper_repeats_and_spread():
    calls = [0]

    def fn():
        calls[0] += 1
        time.sleep(0.002)
    s = measure(fn, "cpu", warmup_ms=5, rep_ms=20, min_repeats=12)
    assert s["repeats"] >= 12
    # every sample averages calls_per_repeat calls, and warm-up calls come on top
    warm = int(s["warmup"].split()[0])
    assert warm >= 1 and calls[0] >= warm + s["repeats"] * s["calls_per_repeat"]
    assert s["min_ms"] <= s["p25_ms"] <= s["median_ms"] <= s["p75_ms"] <= s["max_ms"]
    assert 2.0 <= s["median_ms"] < 50.0  # a 2 ms sleep, never faster


# -- jobs on CPU ---------------------------------------------------------------------------------
def test_bench_cpu_model_targets_write_complete_results(tmp_path, cal_dir):
    sweep = tmp_path / "sweep"
    r = run_cli("-m", "task=bench", "bench.target=forward,train_step,generate", "decode=recompute", "logger=none",
                "device=cpu", "model.n_layer=1", "train.batch_size=16", "generate.batch_size=2",
                "bench.rep_ms=30", "bench.warmup_ms=5", f"hydra.sweep.dir={sweep}",
                env={"OMP_NUM_THREADS": "1", "TRANSFORMEROP_CALIBRATION_DIR": str(cal_dir)})
    assert r.returncode == 0, r.stderr[-3000:]
    for job, target in enumerate(("forward", "train_step", "generate")):
        res = read_results(sweep / str(job))
        assert res["status"] == "ok", res["error"]
        t = res["timings"][target]
        for key in ("median_ms", "p25_ms", "p75_ms", "repeats", "predicted_ms", "measured_over_predicted",
                    "flagged", "mfu", "peak_source", "mem_total", "peak_memory_bytes", "tok_per_s"):
            assert key in t, (target, key)
        assert t["median_ms"] > 0 and t["predicted_ms"] > 0 and t["peak_source"] == "guess"
        assert t["measured_over_predicted"] == pytest.approx(t["median_ms"] / t["predicted_ms"])
        assert res["metrics"][f"{target}_median_ms"] == t["median_ms"]
        assert res["tables"]["bench"]["rows"][0][0] == target
    assert "[ok]" in r.stdout or "[FLAGGED]" in r.stdout


def test_calibrate_then_predict_uses_measured_ceilings(tmp_path, cal_dir, one_thread, caplog):
    caplog.set_level(logging.INFO)
    res, _ = run_in_process(tmp_path / "cal", "task=calibrate", "device=cpu")
    assert res["status"] == "ok", res["error"]
    cached = calibration.load(CPU)
    for key in ("flops_fp32", "flops_bf16", "bandwidth", "launch_us", "op_train_us", "op_infer_us"):
        assert cached["ceilings"][key]["source"] == "measured" and cached["ceilings"][key]["value"] > 0
    assert cached["ceilings"]["flops_tf32"]["source"] == "guess"  # no TF32 on a CPU: labelled fallback kept
    assert cached["source"] == "measured" and cached["path"].startswith(str(cal_dir))
    res, _ = run_in_process(tmp_path / "pred", "task=predict", "device=cpu")
    assert res["status"] == "ok", res["error"]
    m = res["metrics"]
    assert m["params"] == 101_888 and m["ceilings_source"] == "measured" and m["predicted_step_ms"] > 0
    assert m["h200_step_ms"] > 0
    assert "H200 (datasheet)" in caplog.text


def test_profile_cpu_phases_trace_and_top_ops(tmp_path, cal_dir, one_thread):
    res, _ = run_in_process(tmp_path / "prof", "task=profile", "device=cpu", "model.n_layer=1",
                            "train.batch_size=16", "bench.rep_ms=300", "bench.warmup_ms=10")
    assert res["status"] == "ok", res["error"]
    m = res["metrics"]
    for phase in ("forward", "backward", "optimizer", "step"):  # each reported; no sign asserted: a synced
        # phase is a difference of medians, which a loaded CPU can push below zero (a timing, not a check)
        assert m[f"{phase}_ms"] is not None and math.isfinite(m[f"{phase}_synced_ms"]), (phase, m)
    assert m["sync_over_one"] > 0 and "train_step" in res["timings"]
    assert (tmp_path / "prof" / "trace.json").stat().st_size > 1000
    ops = res["tables"]["top_ops"]
    assert ops["columns"] == ["name", "self_ms_per_step", "count_per_step", "pct_of_step"] and ops["rows"]
    assert [r[0] for r in res["tables"]["phases"]["rows"]] == ["forward", "backward", "optimizer", "step"]


def _host_work(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_planted_slow_path_raises_the_flag(tmp_path, cal_dir, one_thread, monkeypatch, caplog):
    """The flag must fire on a step slower than its prediction and stay quiet on the normal path.

    Making it non-flaky on CPU: (1) the napkin's CPU ceilings are crude (a small step may come in
    at 0.5-3x its prediction), so the per-op cost is fitted to the normal path's own measurement
    and written to the calibration cache -- after that the prediction for this step is what the
    normal path measured, through the real cache and prediction code. (2) A second normal run is
    then within noise of 1x (same config twice), far inside the 3x threshold. (3) The slow path
    adds 5 normal steps of host work, so it lands near 6x, far beyond 3x. (4) Everything is timed
    in process CPU time on one thread, which the neighbours on a shared box cannot inflate.

    On CPU train.slow_path=host_sync itself is free (the host is the device; we measured no
    difference), so here the planted hook also does host work worth 5 normal steps -- like the
    seed's mask built on the host every step -- standing in for what the hook costs on a GPU
    (the device runs time the real one)."""
    caplog.set_level(logging.INFO)
    monkeypatch.setenv("TRANSFORMEROP_CPU_CLOCK", "process")
    common = ["task=bench", "bench.target=train_step", "device=cpu", "train.batch_size=32",
              "bench.rep_ms=100", "bench.warmup_ms=20", "bench.flag_ratio=3"]
    first, _ = run_in_process(tmp_path / "fit", *common)
    t = first["timings"]["train_step"]
    roof = max(t["compute_ms"], t["memory_ms"])
    fitted_us = max(0.1, (t["median_ms"] - roof) * 1e3 / t["kernels"])
    calibration.save(CPU, {"op_train_us": (fitted_us, "fitted to the normal train step (test)")})
    assert calibration.load(CPU)["ceilings"]["op_train_us"]["value"] == pytest.approx(fitted_us)

    normal, _ = run_in_process(tmp_path / "normal", *common, "train.slow_path=none")
    n = normal["timings"]["train_step"]
    assert normal["status"] == "ok" and n["launch_source"] == "measured" and "process" in n["method"]
    assert not n["flagged"], n["measured_over_predicted"]
    assert "[ok] train_step" in caplog.text
    caplog.clear()

    import transformerop.train as train_mod
    real = train_mod._plant_slow_path
    work_s = 5 * t["median_ms"] / 1e3

    def slow(kind, x, device):
        real(kind, x, device)
        if kind != "none":
            _host_work(work_s)
    monkeypatch.setattr(train_mod, "_plant_slow_path", slow)
    slow_res, _ = run_in_process(tmp_path / "slow", *common, "train.slow_path=host_sync")
    s = slow_res["timings"]["train_step"]
    assert slow_res["status"] == "ok"
    assert s["flagged"] and s["measured_over_predicted"] > 3.0, s["measured_over_predicted"]
    assert slow_res["metrics"]["flagged"] is True
    assert "[FLAGGED] train_step" in caplog.text


def _no_causal_mask(self, q, k, v, mask):
    """A classic wrong kernel: forgets the causal mask."""
    return torch.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1) @ v


@pytest.mark.parametrize("target", ["attention", "forward"])
def test_wrong_kernel_fails_the_job_with_no_timing(tmp_path, cal_dir, one_thread, monkeypatch, target):
    from transformerop.model.attention.sdpa import SDPAAttention
    monkeypatch.setattr(SDPAAttention, "attend", _no_causal_mask)
    res, code = run_in_process(tmp_path / target, "task=bench", f"bench.target={target}", "attention=sdpa",
                               "device=cpu", "train.batch_size=4", "bench.rep_ms=20")
    assert code == 1
    assert res["status"] == "failed" and res["error"]["type"] == "Mismatch"
    assert "relative error" in res["error"]["message"]
    assert res["timings"] == {} and not any(k.endswith("_ms") for k in res["metrics"])
    assert "bench" not in res["tables"]


class _DqOff(torch.autograd.Function):
    """A planted wrong backward: the forward is SDPA's, but dq comes back 1% too large."""

    @staticmethod
    def forward(ctx, q, k, v):
        with torch.enable_grad():
            q_, k_, v_ = (t.detach().requires_grad_() for t in (q, k, v))
            out = torch.nn.functional.scaled_dot_product_attention(q_, k_, v_, is_causal=True)
        ctx.save_for_backward(q_, k_, v_, out)
        return out.detach()

    @staticmethod
    def backward(ctx, g):
        q_, k_, v_, out = ctx.saved_tensors
        dq, dk, dv = torch.autograd.grad(out, (q_, k_, v_), g)
        return dq * 1.01, dk, dv


def _wrong_backward(self, q, k, v, mask):
    return _DqOff.apply(q, k, v)


def test_planted_wrong_backward_fails_the_gradient_gate(tmp_path, cal_dir, one_thread, monkeypatch):
    """The forward (and so the loss) is right; only the gradient gate can see the 1% dq error."""
    from transformerop.model.attention.sdpa import SDPAAttention
    real = SDPAAttention.attend
    monkeypatch.setattr(SDPAAttention, "attend", _wrong_backward)
    res, code = run_in_process(tmp_path / "bad", "task=bench", "bench.target=train_step", "attention=sdpa",
                               "device=cpu", "train.batch_size=4", "bench.rep_ms=20")
    assert code == 1 and res["status"] == "failed" and res["error"]["type"] == "Mismatch"
    msg = res["error"]["message"]
    assert msg.startswith("train_step gradient of ") and "(norm) vs float64 reference exceeds" in msg
    assert res["timings"] == {}
    monkeypatch.setattr(SDPAAttention, "attend", real)  # the real backward passes the gate and is timed
    ok, code = run_in_process(tmp_path / "ok", "task=bench", "bench.target=train_step", "attention=sdpa",
                              "device=cpu", "train.batch_size=4", "bench.rep_ms=20")
    assert code is None and ok["metrics"]["check_grad_err"] < 1e-5 and "train_step" in ok["timings"]


def _wrong_past_row0(self, q, k, v, mask):
    """Right for batch row 0 only: a reference that checked one chunk would pass it."""
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return torch.cat([out[:1], out[1:] * 1.05])


def test_the_attention_check_covers_every_batch_row_in_chunks(monkeypatch):
    """The float64 reference runs a batch row at a time here (a long sequence's scores would not
    fit at once): the right kernel passes, forward and gradients, and a kernel wrong only past
    row 0 fails."""
    from transformerop.measure import reference as ref
    from transformerop.model.attention.sdpa import SDPAAttention
    monkeypatch.setattr(ref, "REFERENCE_ELEMENTS", 2 * 12 * 12)  # one (H=2, T=12) batch row per chunk
    attn = get_backend("sdpa")(make_cfg("model=gpt", "model.n_head=2", "model.n_embd=16").model, {"dropout": 0.0})
    errs = ref.check_attend(attn, 3, 2, 12, 8, torch.float32, "float32", CPU, backward=True)
    assert set(errs) == {"attention_fwd_err", "attention_dq_err", "attention_dk_err", "attention_dv_err"}
    assert max(errs.values()) < 1e-5
    monkeypatch.setattr(SDPAAttention, "attend", _wrong_past_row0)
    with pytest.raises(ref.Mismatch, match="attention forward: max relative error"):
        ref.check_attend(attn, 3, 2, 12, 8, torch.float32, "float32", CPU)


def test_a_host_time_that_fails_leaves_the_timing_standing():
    """bench's host time per call: a call that raises there is recorded as host_error, not a failed job."""
    from transformerop.measure import timing
    from transformerop.tasks.bench import _host
    assert _host(lambda: 1 / 0, CPU) == {"host_us": None, "host_error": "ZeroDivisionError: division by zero"}
    ok = _host(lambda: torch.ones(4).sum(), CPU)
    assert ok["host_us"] > 0 and ok["host_calls"] == 25 * timing.HOST_BLOCK


def test_a_timing_after_a_gpu_profile_says_so(monkeypatch):
    """Once the process has profiled the GPU, every timing it takes carries after_profiler."""
    from transformerop.measure import timing
    monkeypatch.setattr(timing, "_profiled", {"gpu": False, "warned": False})
    assert "host_after_profiler" not in timing.host_time(lambda: None, CPU, repeats=2)
    timing.profiling_gpu()
    assert timing.host_time(lambda: None, CPU, repeats=2)["host_after_profiler"] is True


# -- GPU (pytest -m gpu on the device) ----------------------------------------------------------
@pytest.mark.gpu
@gpu
def test_gpu_calibrate_measures_every_ceiling(tmp_path, cal_dir):
    res, _ = run_in_process(tmp_path / "cal", "task=calibrate")
    assert res["status"] == "ok", res["error"]
    cal = calibration.load(torch.device("cuda"))
    assert cal["source"] == "measured"
    c = {k: v["value"] for k, v in cal["ceilings"].items()}
    assert all(cal["ceilings"][k]["source"] == "measured" for k in calibration.KEYS)
    assert c["flops_bf16"] > c["flops_tf32"] > c["flops_fp32"] > 1e12
    assert c["graph_node_us"] < c["launch_us"] < c["op_train_us"]


@pytest.mark.gpu
@gpu
def test_gpu_graph_forward_is_predicted_on_graph_nodes(tmp_path, cal_dir):
    eager, _ = run_in_process(tmp_path / "eager", "task=bench", "bench.target=forward", "bench.batch_size=1")
    graph, _ = run_in_process(tmp_path / "graph", "task=bench", "bench.target=forward", "bench.batch_size=1",
                              "bench.graph=true")
    assert eager["status"] == graph["status"] == "ok", (eager["error"], graph["error"])
    e, g = eager["timings"]["forward"], graph["timings"]["forward"]
    # The prediction prices one replay by graph nodes and eager by launches; which is faster is the
    # graph_overhead study's finding, not a test.
    assert g["launch_key"] == "graph_node_us" and e["bound"] == "launch"
    assert g["predicted_ms"] < e["predicted_ms"]


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_bench_seed_gpt_train_step(tmp_path, cal_dir, dtype):
    res, _ = run_in_process(tmp_path / dtype, "task=bench", "bench.target=train_step", "data=shakespeare",
                            "model=gpt", f"train.dtype={dtype}")
    assert res["status"] == "ok", res["error"]
    t = res["timings"]["train_step"]
    assert 0 < t["mfu"] < 1 and t["predicted_ms"] > 0 and t["peak_memory_bytes"] > t["mem_weights"]


@pytest.mark.gpu
@gpu
def test_gpu_bench_profile_sums_the_kernels(tmp_path, cal_dir):
    """bench.profile: SDPA fwd is one kernel per call (flash/cuDNN), fwd+bwd a handful; kernel time
    is positive and at most the wall time (small slack: the profiled run is warm, do_bench's not)."""
    res, _ = run_in_process(tmp_path / "p", "task=bench", "bench.target=attention", "model=gpt",
                            "bench.profile=true", "train.dtype=bfloat16")
    assert res["status"] == "ok", res["error"]
    fwd, both = res["timings"]["attention_fwd"], res["timings"]["attention_fwd_bwd"]
    assert fwd["kernels"] >= 1 and both["kernels"] > fwd["kernels"] and 0 < fwd["kernel_us"] < both["kernel_us"]
    assert 0 < fwd["gpu_busy"] <= 1.2 and 0 < both["gpu_busy"] <= 1.2
    assert "attention_fwd_kernels" in res["tables"] and res["metrics"]["attention_fwd_kernel_us"] == fwd["kernel_us"]


@pytest.mark.gpu
@gpu
def test_gpu_wrong_kernel_fails(tmp_path, cal_dir, monkeypatch):
    from transformerop.model.attention.sdpa import SDPAAttention
    monkeypatch.setattr(SDPAAttention, "attend", _no_causal_mask)
    res, code = run_in_process(tmp_path / "bad", "task=bench", "bench.target=attention")
    assert code == 1 and res["status"] == "failed" and res["timings"] == {}


@pytest.mark.gpu
@gpu
def test_gpu_host_time_tells_a_launch_from_a_sync():
    """host_time: launches alone have a host figure; a call that reads a GPU value has none."""
    from transformerop.measure.timing import host_time
    x = torch.randn(1 << 20, device="cuda")
    launch = host_time(lambda: x.mul_(1.0), "cuda")
    waits = host_time(lambda: x.sum().item(), "cuda", repeats=2)
    assert launch["host_us"] is not None and launch["host_p25_us"] <= launch["host_us"] <= launch["host_p75_us"]
    assert waits["host_us"] is None and "syncs" in waits["host_note"]


@pytest.mark.gpu
@gpu
def test_gpu_bench_graphed_attention_checks_its_replay(tmp_path, cal_dir, monkeypatch):
    """bench.graph for the attention op: past block_size, head dim 128, the replay is checked
    against eager before timing, and a replay that returns the wrong thing fails the job."""
    over = ("task=bench", "bench.target=attention", "model=gpt", "attention=triton", "train.dtype=bfloat16", "bench.graph=true",
            "bench.seq_len=512", "model.n_embd=768", "bench.batch_size=4")
    res, _ = run_in_process(tmp_path / "ok", *over)
    assert res["status"] == "ok", res["error"]
    m = res["metrics"]
    assert m["check_attention_fwd_graph_vs_eager_err"] < 0.02 and m["check_attention_fwd_bwd_graph_vs_eager_err"] < 0.02
    assert res["timings"]["attention_fwd"]["head_dim"] == 128 and res["timings"]["attention_fwd"]["host_us"] > 0
    from transformerop import graphs
    monkeypatch.setattr(graphs.Captured, "replay", lambda self: (self.graph.replay(), torch.zeros_like(self.out)
                                                                  if torch.is_tensor(self.out) else self.out)[1])
    bad, code = run_in_process(tmp_path / "bad", *over)
    assert code == 1 and bad["status"] == "failed" and "graph replay" in bad["error"]["message"]


def test_peak_follows_the_kernels_own_tf32_choice():
    """Our Triton attention runs fp32 on TF32 tensor cores whatever torch's flag says: its MFU is
    judged against the TF32 peak, never the fp32 one (which read 197% on the H200)."""
    from transformerop.measure import calibration
    assert calibration.flops_key("float32", "cuda", tf32=True) == "flops_tf32"
    assert calibration.flops_key("float32", "cuda", tf32=False) == "flops_fp32"
    assert calibration.flops_key("float32", "cpu", tf32=True) == "flops_fp32"  # no tensor cores here
    assert calibration.flops_key("bfloat16", "cuda", tf32=False) == "flops_bf16"


def test_the_kernel_table_keeps_every_kernel_most_time_first():
    """summarize: per-unit time and launches of every kernel (the tail too, not a top ten), ordered
    by time, medians per launch; the totals over every launch."""
    from transformerop.measure.profiler import summarize
    by = {f"k{i}": [float(i)] * 2 for i in range(1, 13)}  # 12 kernels, k12 the most time
    by["gemm_" + "x" * 120] = [30.0, 10.0, 20.0]
    s = summarize(by, per=2)
    assert len(s["table"]) == 13 and s["kernels"] == (24 + 3) / 2
    assert s["kernel_us"] == (sum(2 * i for i in range(1, 13)) + 60) / 2
    assert s["table"][0] == [("gemm_" + "x" * 120)[:100], 30.0, 1.5, 20.0]
    assert [row[0] for row in s["table"][1:]] == [f"k{i}" for i in range(12, 0, -1)]
    assert s["table"][-1] == ["k1", 1.0, 1.0, 1.0]


def test_kernels_by_kind_from_their_names():
    """by_kind: the names torch, cuBLAS, cuDNN and our kernels go by in a train step's profile, each
    under its kind, summed, most time first (the optimizer's multi-tensor norm is not a LayerNorm)."""
    from transformerop.report.kinds import by_kind, kind
    names = {
        "_add_norm_bwd": "norm",
        "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0": "attention",
        "_bwd_kernel": "attention",
        "nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT": "matmul",
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false, f": "matmul",
        "void at::native::vectorized_elementwise_kernel<8, at::native::GeluBackwardCUDAKernelImpl(at::TensorI":
            "elementwise",
        "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrapper_t<float,":
            "reduction",
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy_vectorized<at::native::(anonymous namesp": "copy",
        "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda(at::TensorIt": "copy",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace):":
            "optimizer",
        "void at::native::lpnorm_cleanup<float, (at::native::NormType)1, float, true, float>(float const*, at":
            "optimizer",
        "void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortOnesweepKernel<at_cuda_detail::cub::det":
            "embedding",
        "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(f": "loss",
        "Memset (Unknown)": "memset",
        "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<unsigned long, 2": "random",
        "some_kernel_of_its_own": "other",
    }
    assert {n: kind(n) for n in names} == names
    table = [["_add_norm_bwd", 30.0, 13.0, 2.0], ["_bwd_kernel", 50.0, 6.0, 8.0], ["_add_norm_fwd", 25.0, 13.0, 2.0],
             ["Memset (Unknown)", 1.5, 40.0, 0.0]]
    assert by_kind(table) == [["norm", 55.0, 26.0], ["attention", 50.0, 6.0], ["memset", 1.5, 40.0]]
