"""Decode paths (transformerop/decode.py) and task=generate.

CPU: a tiny GPT with random weights (2 layers, 32 wide, block 16, vocab 20, no dropout), its
weights drawn wider than GPT's init so greedy tokens vary and are far from ties. The reference
for every cached path is a full forward over the documented window (see decode.py: at most
block_size tokens; when full, restart on the last `keep`). GPU (`-m gpu`): the graph and
compiled paths against recompute, fp32 token for token, bf16 logits within tolerance.
"""
import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
import torch

from transformerop.config import AttentionConfig
from transformerop.decode import Decoder, check, generate, gumbel_noise, sample_next
from transformerop.model import BackendUnavailable
from transformerop.model.bigram import Bigram
from transformerop.model.gpt import GPT

ROOT = Path(__file__).resolve().parents[1]
W, V = 16, 20
CPU_PATHS = ["recompute", "kv_cache", "static"]
CACHED_CPU = ["kv_cache", "static"]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the device: pytest -m gpu)")


def tiny_gpt(attention="sdpa", device="cpu", seed=1, n_layer=2, n_embd=32, n_head=2, block=W, vocab=V):
    torch.manual_seed(seed)
    m = GPT(NS(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block, dropout=0.0, bias=True),
            AttentionConfig(name=attention), vocab)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() >= 2:
                p.normal_(std=0.2)
    return m.to(device).eval()


def make_prompt(B=2, T=3, device="cpu", vocab=V):
    return torch.randint(vocab, (B, T), generator=torch.Generator().manual_seed(0)).to(device)


def window_logits(model, out, T0, n, keep=None):
    """The documented behaviour, written independently: logits of each new token from one full
    forward over its window (at most block_size tokens; when full, the last `keep`)."""
    block = model.block_size
    keep = keep or block // 2
    start, logits = max(0, T0 - block), []
    for t in range(T0, T0 + n):
        if t - start > block:
            start = t - keep
        logits.append(model(out[:, start:t])[0][:, -1])
    return torch.stack(logits)


def decode_with_logits(model, path, prompt, n, temperature=0.0, top_k=None, keep=None, seed=0):
    dec = Decoder(model, path, prompt.size(0), prompt.size(1) + n, temperature, top_k, keep)
    logits = []
    gen = torch.Generator(device=prompt.device).manual_seed(seed)
    out = dec(prompt, gen, on_logits=lambda i, x: logits.append(x.float().clone())).clone()
    return out, torch.stack(logits)


def cfg_for(decode="kv_cache", attention="sdpa", model="gpt"):
    return NS(decode=NS(name=decode), attention=NS(name=attention), model=NS(name=model))


# -- fp32 agreement -------------------------------------------------------------------------------
@pytest.mark.parametrize("attention", ["naive", "sdpa"])
def test_greedy_tokens_identical_across_paths_past_block_size(attention):
    model, prompt = tiny_gpt(attention), make_prompt()
    n = 3 * W  # crosses the window several times
    ref = generate(model, prompt, n, temperature=0, path="recompute")
    assert ref.shape == (2, 3 + n)
    assert len(set(ref[0, 3:].tolist())) > 3, "degenerate greedy output makes the comparison weak"
    for path in CACHED_CPU:
        assert torch.equal(generate(model, prompt, n, temperature=0, path=path), ref), path


@pytest.mark.parametrize("path", CPU_PATHS)
@pytest.mark.parametrize("T0,keep", [(3, None), (1, 1), (5, W), (W + 5, None)])
def test_cached_logits_equal_window_forward(path, T0, keep):
    """Every step's logits equal one full forward over the documented window, within 1e-5."""
    model, prompt = tiny_gpt(), make_prompt(T=T0)
    n = 2 * W + 3
    out, logits = decode_with_logits(model, path, prompt, n, keep=keep)
    with torch.no_grad():
        ref = window_logits(model, out, T0, n, keep)
    torch.testing.assert_close(logits, ref, atol=1e-5, rtol=0)
    assert torch.equal(out[:, T0:], ref.argmax(-1).T)  # greedy: each token is its logits' argmax


def test_generate_keeps_training_mode_and_restores():
    model = tiny_gpt()
    model.train()
    generate(model, make_prompt(), 5, temperature=0, path="static")
    assert model.training


def test_bigram_every_cpu_path():
    """Bigram has no blocks and ignores caches: every path is the same lookup of the last token."""
    torch.manual_seed(0)
    model = Bigram(NS(block_size=8), None, V).eval()
    prompt = make_prompt()
    ref = generate(model, prompt, 20, temperature=0, path="recompute")
    assert torch.equal(ref[:, 3:], model(ref[:, 2:-1])[0].argmax(-1))
    for path in CACHED_CPU:
        assert torch.equal(generate(model, prompt, 20, temperature=0, path=path), ref)


# -- sampling -------------------------------------------------------------------------------------
def test_same_seed_same_sample_different_seed_different():
    model, prompt = tiny_gpt(), make_prompt()

    def sample(seed, path="kv_cache", top_k=None):
        return generate(model, prompt, 40, temperature=1.0, top_k=top_k, path=path,
                        generator=torch.Generator().manual_seed(seed))

    assert torch.equal(sample(1), sample(1))
    assert not torch.equal(sample(1), sample(2))
    for path in CPU_PATHS:  # pre-drawn noise: in fp32 every path draws the same text from a seed
        assert torch.equal(sample(7, path, top_k=5), sample(7, "recompute", top_k=5)), path


def test_top_k_one_is_greedy_and_top_k_restricts():
    logits = torch.randn(4, V, generator=torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(0)
    assert torch.equal(sample_next(logits, 1.0, 1, gen), logits.argmax(-1, keepdim=True))
    top3 = logits.topk(3, dim=-1).indices
    for _ in range(50):
        assert (sample_next(logits, 2.0, 3, gen) == top3).any(-1).all()


def test_gumbel_max_samples_softmax():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    n = 40_000
    noise = gumbel_noise((n, 4), "cpu", torch.Generator().manual_seed(0))
    draws = sample_next(logits.expand(n, 4), 0.5, noise=noise)
    freq = torch.bincount(draws.view(-1), minlength=4).float() / n
    torch.testing.assert_close(freq, torch.softmax(logits[0] / 0.5, -1), atol=0.01, rtol=0)


# -- config checks --------------------------------------------------------------------------------
def test_check_refuses_impossible_combinations():
    with pytest.raises(ValueError, match="decode=recompute"):
        check(cfg_for("kv_cache", "naive_loop"), "cpu")
    with pytest.raises(ValueError, match="under an explicit mask, which attention=triton refuses"):
        check(cfg_for("static", "triton"), "cpu")
    with pytest.raises(BackendUnavailable, match="decode=static_graph needs CUDA"):
        check(cfg_for("static_graph"), "cpu")
    with pytest.raises(ValueError, match="choose one of"):
        check(cfg_for("bogus"), "cpu")
    check(cfg_for("recompute", "naive_loop"), "cpu")
    check(cfg_for("static", model="bigram"), "cpu")
    check(cfg_for("compiled"), "cpu")


def test_naive_loop_recomputes():
    model = tiny_gpt("naive_loop")
    ref = generate(model, make_prompt(), W + 4, temperature=0, path="recompute")
    assert ref.shape == (2, 3 + W + 4)


# -- compiled on CPU --------------------------------------------------------------------------------
def test_compiled_matches_recompute_on_cpu():
    model, prompt = tiny_gpt(), make_prompt()
    start = time.perf_counter()
    try:
        out, logits = decode_with_logits(model, "compiled", prompt, 2 * W + 3)
    except Exception as e:  # Inductor on CPU needs a working C++ compiler
        pytest.skip(f"torch.compile does not run on this CPU: {type(e).__name__}: {str(e)[:200]}")
    if time.perf_counter() - start > 120:
        pytest.skip(f"torch.compile on CPU took {time.perf_counter() - start:.0f} s (budget 120 s)")
    ref = generate(model, prompt, 2 * W + 3, temperature=0, path="recompute")
    assert torch.equal(out, ref)
    with torch.no_grad():
        torch.testing.assert_close(logits, window_logits(model, out, 3, 2 * W + 3), atol=1e-5, rtol=0)


def test_parity_explains_a_token_flip_only_by_a_near_tie_in_bf16_too():
    """The one parity check in bf16: the same sampling gives the same tokens and passes; a planted
    fault -- the path samples with another seed's noise, its logits untouched -- flips tokens far
    from any tie, which the logit check alone would let through, and must be refused."""
    from transformerop.decode.parity import parity
    from transformerop.measure.reference import Mismatch
    model, prompt = tiny_gpt().to(torch.bfloat16), make_prompt()
    dec = Decoder(model, "static", prompt.size(0), prompt.size(1) + 20, temperature=1.0)
    same = parity(model, dec, prompt, 20, "bfloat16", seeded=lambda: torch.Generator().manual_seed(4))
    assert same["parity_tokens_agree"] == 20
    seeds = iter((4, 5))  # the reference draws first, then the path
    with pytest.raises(Mismatch, match="differs from the reference path in row"):
        parity(model, dec, prompt, 20, "bfloat16", seeded=lambda: torch.Generator().manual_seed(next(seeds)))


# -- task=generate through the CLI ------------------------------------------------------------------
def run_cli(tmp, *overrides):
    cmd = [sys.executable, "run.py", "task=generate", "logger=none", f"hydra.run.dir={tmp}", "train.progress=false",
           "train.max_iters=20", "train.batch_size=32", "data.n_test=100", *overrides]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    results = tmp / "results.json"
    return proc, json.loads(results.read_text()) if results.exists() else None


def test_cli_generate_trains_times_and_records_text(tmp_path):
    proc, r = run_cli(tmp_path / "train", "decode=static", "generate.tokens=30", "generate.repeats=3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = r["metrics"]
    assert r["status"] == "ok" and m["decode_tok_per_s"] > 0 and m["ms_per_token"] > 0 and m["decode"] == "static"
    assert m["parity_tokens_agree"] == m["parity_tokens"] == 30
    table = r["tables"]["generations"]
    text = table["rows"][0][table["columns"].index("text")]
    assert len(text) == 30
    assert "generate" in r["timings"] and r["timings"]["generate"]["repeats"] >= 3

    # the same weights from the checkpoint, sampled with a seed, twice: the same text
    ckpt = tmp_path / "train" / "ckpt.pt"
    texts = []
    for i in range(2):
        proc, r = run_cli(tmp_path / f"load{i}", f"generate.checkpoint={ckpt}", "decode=kv_cache",
                          "generate.tokens=40", "generate.batch_size=2", "generate.top_k=5", "generate.repeats=2",
                          "generate.prompt='12+34='")
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert r["metrics"]["decode_tok_per_s"] > 0 and "params" not in r["metrics"]  # loaded, not trained
        texts.append([row[4] for row in r["tables"]["generations"]["rows"]])
    assert texts[0] == texts[1] and len(texts[0]) == 2

    proc, r = run_cli(tmp_path / "wrong", f"generate.checkpoint={ckpt}", "model.n_layer=3")
    assert proc.returncode != 0 and r["status"] == "failed"
    assert "different model" in r["error"]["message"]


def test_cli_refuses_cached_path_for_naive_loop(tmp_path):
    proc, _ = run_cli(tmp_path / "x", "attention=naive_loop", "decode=kv_cache")
    assert proc.returncode == 2
    assert "decode=recompute" in proc.stderr.strip().splitlines()[-1]


# -- GPU ----------------------------------------------------------------------------------------------
GPU_PATHS = ["recompute", "kv_cache", "static", "static_graph", "compiled"]


def gpu_model(dtype=torch.float32):
    """Block 64 so that 150 tokens cross the window twice; 4 layers, 128 wide, vocab 65."""
    return tiny_gpt("sdpa", "cuda", n_layer=4, n_embd=128, n_head=4, block=64, vocab=65).to(dtype)


@pytest.fixture(scope="module")
def gpu_runs():
    """Per path: one fp32 Decoder (sampling, T=1, top_k=10; built once: compiled compiles once),
    its tokens and per-step logits for a seed."""
    model, prompt = gpu_model(), make_prompt(T=5, device="cuda", vocab=65)
    runs = {}
    for path in GPU_PATHS:
        dec = Decoder(model, path, 2, 5 + 150, temperature=1.0, top_k=10)
        logits = []
        gen = torch.Generator(device="cuda").manual_seed(3)
        out = dec(prompt, gen, on_logits=lambda i, x: logits.append(x.float().clone())).clone()
        runs[path] = (dec, out, torch.stack(logits))
    return model, prompt, runs


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("path", GPU_PATHS[1:])
def test_gpu_paths_match_recompute_fp32(gpu_runs, path):
    model, prompt, runs = gpu_runs
    _, out, logits = runs[path]
    _, ref, ref_logits = runs["recompute"]
    assert torch.equal(out, ref), path
    torch.testing.assert_close(logits, ref_logits, atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        torch.testing.assert_close(logits, window_logits(model, out, 5, 150), atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
@cuda
def test_gpu_static_graph_greedy_matches_recompute_fp32():
    model, prompt = gpu_model(), make_prompt(T=5, device="cuda", vocab=65)
    out = generate(model, prompt, 150, temperature=0, path="static_graph")
    assert torch.equal(out, generate(model, prompt, 150, temperature=0, path="recompute"))


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("path", GPU_PATHS)
def test_gpu_decode_loop_never_syncs(gpu_runs, path):
    """The whole generation (prefill, re-prefills, steps, sampling) under sync debug mode 'error'."""
    _, prompt, runs = gpu_runs
    dec = runs[path][0]
    gen = torch.Generator(device="cuda").manual_seed(5)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        dec(prompt, gen)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("path", GPU_PATHS)
def test_gpu_bf16_logits_within_tolerance(path):
    """bf16 weights and caches, teacher-forced on the path's own tokens: each step's logits
    against a bf16 full forward over the same window (the cache's own error: reduction order) and
    against the fp32 model (bf16 itself: 4 layers of rounding)."""
    model, prompt = gpu_model(), make_prompt(T=5, device="cuda", vocab=65)
    model_bf16 = gpu_model(torch.bfloat16)
    out, logits = decode_with_logits(model_bf16, path, prompt, 150, temperature=1.0, seed=3)
    with torch.no_grad():
        for ref_model, tol in ((model_bf16, 3e-2), (model, 1e-1)):
            ref = window_logits(ref_model, out, 5, 150).float()
            rel = ((logits - ref).abs().max() / ref.abs().max()).item()
            assert rel < tol, (ref_model.wte.weight.dtype, rel)
