import math

import pytest
import torch
from conftest import make_cfg

from transformerop.errors import refusal
from transformerop.model import BACKENDS, build_model, count_params
from transformerop.model.attention import REFERENCE, get_backend


def tiny(*overrides):
    return make_cfg("model=gpt", "model.n_layer=2", "model.n_head=4", "model.n_embd=32", "model.block_size=16",
                    "model.dropout=0.0", *overrides)


# the backends whose own check passes on the CPU: one added in one file is tested here, no list to edit
CPU_BACKENDS = [name for name in BACKENDS
                if refusal(get_backend(name).check, tiny(f"attention={name}"), torch.device("cpu")) is None]
assert REFERENCE in CPU_BACKENDS and len(CPU_BACKENDS) >= 3, CPU_BACKENDS  # the eager ones at least


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_causality(backend):
    """Changing token t never changes the logits at positions before t."""
    torch.manual_seed(0)
    model = build_model(tiny(f"attention={backend}"), vocab_size=11).eval()
    x = torch.randint(11, (2, 16))
    base, _ = model(x)
    for t in (0, 5, 15):
        x2 = x.clone()
        x2[:, t] = (x2[:, t] + 1) % 11
        out, _ = model(x2)
        assert torch.equal(out[:, :t], base[:, :t])
        assert not torch.allclose(out[:, t], base[:, t])


def _ln(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def _qkv(block, x, n_head):
    """q, k, v (B, H, T, D) in float64 from either attention layout (one c_attn, or per-head modules)."""
    a = block.attn
    B, T, C = x.shape
    if hasattr(a, "c_attn"):
        W, bias = a.c_attn.weight.double(), a.c_attn.bias.double()
        q, k, v = (x @ W.T + bias).split(C, dim=-1)
        return [t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v)]
    return [torch.stack([x @ getattr(h, n).weight.double().T for h in a.heads], dim=1) for n in ("query", "key", "value")]


def reference_gpt(model, idx):
    """The GPT written out in float64 from its weights: LayerNorm, causal softmax attention and
    the erf GELU as formulas. Shares nothing with the modules but their parameters."""
    n_head = model.cfg.n_head
    T = idx.size(1)
    x = model.wte.weight.double()[idx] + model.wpe.weight.double()[:T]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for blk in model.blocks:
        h = _ln(x, blk.ln_1.weight.double(), blk.ln_1.bias.double())
        q, k, v = _qkv(blk, h, n_head)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        p = torch.exp(s.masked_fill(~causal, -math.inf) - s.masked_fill(~causal, -math.inf).amax(-1, keepdim=True))
        y = (p / p.sum(-1, keepdim=True)) @ v
        y = y.transpose(1, 2).reshape(x.shape)
        x = x + y @ blk.attn.c_proj.weight.double().T + blk.attn.c_proj.bias.double()
        h = _ln(x, blk.ln_2.weight.double(), blk.ln_2.bias.double())
        u = h @ blk.mlp.c_fc.weight.double().T + blk.mlp.c_fc.bias.double()
        u = 0.5 * u * (1 + torch.erf(u / math.sqrt(2)))
        x = x + u @ blk.mlp.c_proj.weight.double().T + blk.mlp.c_proj.bias.double()
    x = _ln(x, model.ln_f.weight.double(), model.ln_f.bias.double())
    return x @ model.wte.weight.double().T  # tied head


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_backend_matches_the_float64_formula(backend):
    torch.manual_seed(0)
    m = build_model(tiny(f"attention={backend}"), 11).eval()
    for p in m.parameters():  # non-trivial biases and norms, so a dropped term shows
        with torch.no_grad():
            p.add_(0.05 * torch.randn_like(p))
    x = torch.randint(11, (3, 16))
    got, want = m(x)[0].double(), reference_gpt(m, x)
    assert (got - want).abs().max().item() < 1e-5 * want.abs().max().item()


def test_the_float64_formula_catches_a_wrong_model():
    """Planted fault: dropping one LayerNorm's bias moves the logits far past the tolerance."""
    torch.manual_seed(0)
    m = build_model(tiny("attention=sdpa"), 11).eval()
    for p in m.parameters():
        with torch.no_grad():
            p.add_(0.05 * torch.randn_like(p))
    x = torch.randint(11, (3, 16))
    want = reference_gpt(m, x)
    with torch.no_grad():
        m.blocks[0].ln_2.bias.zero_()
    assert (m(x)[0].double() - want).abs().max().item() > 1e-3 * want.abs().max().item()


def test_param_counts_and_weight_tying():
    gpt = build_model(make_cfg("model=gpt"), 65)
    # 6 blocks x (12*384^2 + 13*384) + 65*384 + 256*384 + 2*384 (final LN)
    assert count_params(gpt) == 6 * (12 * 384 * 384 + 13 * 384) + 65 * 384 + 256 * 384 + 2 * 384
    assert gpt.lm_head.weight is gpt.wte.weight
    add = build_model(make_cfg(), 12)
    assert 90_000 < count_params(add) < 110_000
    assert count_params(build_model(make_cfg("model=bigram"), 65)) == 65 * 65


def test_the_model_is_made_where_it_is_asked_for():
    """build_model(..., device): every parameter and buffer made there, none on the CPU to copy."""
    gpt = build_model(make_cfg("model=gpt"), 65, "meta")
    assert {t.device.type for t in [*gpt.parameters(), *gpt.buffers()]} == {"meta"}
    assert gpt.lm_head.weight is gpt.wte.weight


def test_no_torch_transformer_modules():
    gpt = build_model(make_cfg("model=gpt"), 65)
    names = {type(m).__name__ for m in gpt.modules()}
    assert not any(n.startswith("Transformer") or n == "MultiheadAttention" for n in names)


def test_every_backend_is_a_config_option():
    """The registry line is the option: attention=NAME composes for every backend, nothing else does."""
    from hydra.errors import MissingConfigException
    for name in BACKENDS:
        assert make_cfg(f"attention={name}").attention.name == name
    with pytest.raises(MissingConfigException):
        make_cfg("attention=bogus")


def test_dense_embedding_grad_matches_a_float64_scatter():
    """model.dense_embedding_grad: the same logits, and wte's and wpe's gradients against float64
    sums written here (each token's gradient row added into its id's row; each position's rows
    summed over the batch), with ids repeated and some never used; a vocabulary wider than
    n_embd keeps the gather's own backward."""
    torch.manual_seed(0)
    plain = build_model(tiny(), vocab_size=11).eval()
    dense = build_model(tiny("model.dense_embedding_grad=true"), vocab_size=11).eval()
    dense.load_state_dict(plain.state_dict())
    assert dense.dense_embedding_grad and not plain.dense_embedding_grad
    # 512 tokens: wte's sum runs as two split-K partials (split_k.py); ids 7..10 never appear,
    # so their rows' gradient is zero
    x = torch.randint(0, 7, (32, 16))
    g = torch.randn(32, 16, 11)
    logits, _ = dense(x)
    assert torch.equal(logits, plain(x)[0])
    (logits * g).sum().backward()
    # independent: d emb from the model's own graph, then the two sums in float64
    plain.zero_grad()
    emb = plain.wte(x) + plain.wpe(torch.arange(16))
    emb.retain_grad()
    out = plain.lm_head(plain.ln_f(_blocks(plain, emb)))
    (out * g).sum().backward()
    d = emb.grad.double()
    want_wte = torch.zeros(11, 32, dtype=torch.float64)
    for b in range(32):
        for t in range(16):
            want_wte[x[b, t]] += d[b, t]
    want_wte += (g.double().reshape(-1, 11).t() @ plain.ln_f(_blocks(plain, emb)).double().reshape(-1, 32))
    rel = lambda got, want: ((got.double() - want).abs().max() / want.abs().max()).item()  # noqa: E731
    errors = {"wte": rel(dense.wte.weight.grad, want_wte), "wpe": rel(dense.wpe.weight.grad, d.sum(0))}  # wte: the head's share too
    assert errors["wte"] < 1e-6 and errors["wpe"] < 1e-6, errors
    assert not build_model(tiny("model.dense_embedding_grad=true"), vocab_size=33).dense_embedding_grad


def test_split_k_product_against_float64(monkeypatch):
    """split_k.t_matmul: a^T b summed over runs of rows, against a float64 product; the runs it picks;
    a planted fault (one run's partial left out) is caught."""
    from transformerop.model import split_k
    assert [split_k.splits(n) for n in (16384, 2048, 1000, 48, 16384 + 8)] == [32, 8, 2, 1, 8]
    torch.manual_seed(0)
    a, b = torch.randn(2048, 65), torch.randn(2048, 384)
    want = a.double().t() @ b.double()
    got = split_k.t_matmul(a, b)
    assert got.dtype == torch.float32 and got.shape == (65, 384)
    assert (got.double() - want).abs().max().item() < 1e-4
    lo = split_k.t_matmul(a.bfloat16(), b.bfloat16())  # on the CPU: one matmul, rounded once
    assert lo.dtype == torch.float32
    assert (lo.double() - want).abs().max().item() / want.abs().max().item() < 2e-2
    real = torch.bmm  # planted: the last run's partial dropped
    monkeypatch.setattr(torch, "bmm", lambda x, y, **kw: torch.cat([real(x[:-1], y[:-1], **kw),
                                                                     torch.zeros_like(real(x[-1:], y[-1:]))]))
    assert (split_k.t_matmul(a, b).double() - want).abs().max().item() > 1.0


def _blocks(model, emb):
    x = model.drop(emb)
    for block in model.blocks:
        x = block(x)
    return x


def test_bf16_stream_is_bf16_through_the_blocks_and_close_to_the_fp32_one():
    """model.stream_dtype=bfloat16 under (CPU) autocast: each block reads and writes a bf16 stream,
    and the loss and gradients stay within bf16's rounding of the fp32 stream's; without autocast
    it changes nothing."""
    from transformerop.measure.reference import norm_rel_err
    x, y = torch.randint(11, (4, 16)), torch.randint(11, (4, 16))
    seen, runs = {}, {}
    for dt in ("float32", "bfloat16"):
        torch.manual_seed(0)
        model = build_model(tiny(f"model.stream_dtype={dt}", "train.dtype=bfloat16"), vocab_size=11)
        def note(m, args, out, dt=dt):  # the first call's dtypes, the one under autocast
            seen.setdefault(dt, (args[0].dtype, out.dtype))
        model.blocks[1].register_forward_hook(note)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(x, y)[1]
        loss.backward()
        runs[dt] = loss.item(), [p.grad for p in model.parameters()]
        with torch.no_grad():  # no autocast: the stream follows the weights
            assert model.blocks[1](torch.zeros(1, 16, 32)).dtype == torch.float32
    assert seen == {"float32": (torch.float32, torch.float32), "bfloat16": (torch.bfloat16, torch.bfloat16)}
    assert runs["bfloat16"][0] == pytest.approx(runs["float32"][0], rel=2e-2)
    assert runs["bfloat16"][0] != runs["float32"][0]  # a different rounding, not the same arithmetic
    assert max(norm_rel_err(g, r) for g, r in zip(runs["bfloat16"][1], runs["float32"][1])) < 5e-2


def test_bf16_stream_without_bf16_training_is_refused(tmp_path):
    from conftest import refused_before_any_work
    err = refused_before_any_work(tmp_path, "model.stream_dtype=bfloat16", "train.dtype=float32", "train.max_iters=1")
    assert "model.stream_dtype=bfloat16" in err and "train.dtype=bfloat16" in err, err[-2000:]


def test_only_a_backend_declaring_packed_grads_splits_heads_through_split_heads():
    """SplitHeads (no copy when the gradients come back packed) is for backends that declare
    packed_grads; the others keep autograd's split, with no Python in their backward."""
    from omegaconf import OmegaConf

    from transformerop.model.attention import get_backend
    from transformerop.model.attention.sdpa import SDPAAttention

    def nodes(t):
        seen, todo = set(), [t.grad_fn]
        while todo:
            f = todo.pop()
            if f is not None and f not in seen:
                seen.add(f)
                todo += [g for g, _ in f.next_functions]
        return {type(f).__name__ for f in seen}

    class Packed(SDPAAttention):
        packed_grads = True
    mcfg = OmegaConf.create({"n_embd": 32, "n_head": 2, "dropout": 0.0, "bias": False})
    x = torch.randn(2, 5, 32, requires_grad=True)
    plain, packed = (cls(mcfg, OmegaConf.create({"name": "sdpa"})) for cls in (SDPAAttention, Packed))
    packed.load_state_dict(plain.state_dict())
    y_plain, y_packed = plain.branch(x), packed.branch(x)
    assert "SplitHeadsBackward" not in nodes(y_plain) and "SplitHeadsBackward" in nodes(y_packed)
    torch.testing.assert_close(y_packed, y_plain)
    g_plain, = torch.autograd.grad(y_plain.sum(), x)
    g_packed, = torch.autograd.grad(y_packed.sum(), x)  # the stack fallback: SDPA's grads are not packed
    torch.testing.assert_close(g_packed, g_plain)
    assert get_backend("triton").packed_grads and not get_backend("sdpa").packed_grads


def test_triton_attention_warmups_run_the_step_and_eval_shapes_and_draw_nothing_random():
    """attention=triton's kernel warm-ups (made before a job's first step) run its forward and
    backward at the train step's shape and its forward at the evaluation's, under the Triton
    interpreter here, without touching torch's random state."""
    import os
    import subprocess
    import sys

    from conftest import ROOT
    code = (
        "import torch\n"
        "from conftest import make_cfg\n"
        "from transformerop.model import kernel_warmups\n"
        "cfg = make_cfg('attention=triton', 'model=gpt', 'model.n_layer=1', 'model.n_embd=32', 'model.n_head=2',\n"
        "               'model.block_size=16', 'model.dropout=0.2', 'train.batch_size=2', 'train.eval_batch_size=3')\n"
        "calls = kernel_warmups(cfg, torch.device('cpu'))\n"
        "state = torch.get_rng_state()\n"
        "from kernels import triton_attention as ta\n"
        "seen = []\n"
        "real = ta.attention\n"
        "ta.attention = lambda q, k, v, **kw: seen.append((tuple(q.shape), q.stride(), kw.get('dropout_p', 0.0))) or real(q, k, v, **kw)\n"
        "for call in calls:\n"
        "    call()\n"
        "assert torch.equal(state, torch.get_rng_state())\n"
        "print(seen)\n")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    # (B, H, T, D) as SplitHeads lays the heads out: views of one (B, T, 3, H, D) buffer
    assert r.stdout.strip().splitlines()[-1] == str([((2, 2, 16, 16), (1536, 16, 96, 1), 0.2),
                                                     ((3, 2, 16, 16), (1536, 16, 96, 1), 0.0)])
