import copy

import pytest
import torch

from conftest import make_cfg
from transformerop.model import BACKENDS, build_model, count_params

CPU_BACKENDS = ["naive_loop", "naive", "sdpa"]


def tiny(*overrides):
    return make_cfg("model=gpt", "model.n_layer=2", "model.n_head=4", "model.n_embd=32", "model.block_size=16",
                    "model.dropout=0.0", *overrides)


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


def test_naive_and_sdpa_match_float64_reference():
    torch.manual_seed(0)
    naive = build_model(tiny("attention=naive"), 11).eval()
    sdpa = build_model(tiny("attention=sdpa"), 11).eval()
    sdpa.load_state_dict(naive.state_dict())
    ref = copy.deepcopy(naive).double()
    x = torch.randint(11, (3, 16))
    want = ref(x)[0]
    for m in (naive, sdpa):
        got = m(x)[0].double()
        assert (got - want).abs().max().item() < 1e-5
    assert (naive(x)[0] - sdpa(x)[0]).abs().max().item() < 1e-5


def test_naive_loop_matches_float64_reference():
    torch.manual_seed(0)
    m = build_model(tiny("attention=naive_loop"), 11).eval()
    x = torch.randint(11, (2, 16))
    got, want = m(x)[0].double(), copy.deepcopy(m).double()(x)[0]
    assert (got - want).abs().max().item() < 1e-5


def test_param_counts_and_weight_tying():
    gpt = build_model(make_cfg("model=gpt"), 65)
    # 6 blocks x (12*384^2 + 13*384) + 65*384 + 256*384 + 2*384 (final LN)
    assert count_params(gpt) == 6 * (12 * 384 * 384 + 13 * 384) + 65 * 384 + 256 * 384 + 2 * 384
    assert gpt.lm_head.weight is gpt.wte.weight
    add = build_model(make_cfg(), 12)
    assert 90_000 < count_params(add) < 110_000
    assert count_params(build_model(make_cfg("model=bigram"), 65)) == 65 * 65


def test_no_torch_transformer_modules():
    gpt = build_model(make_cfg("model=gpt"), 65)
    names = {type(m).__name__ for m in gpt.modules()}
    assert not any(n.startswith("Transformer") or n == "MultiheadAttention" for n in names)


def test_every_backend_is_registered_with_a_config_option():
    from transformerop import REPO_ROOT
    options = {p.stem for p in (REPO_ROOT / "conf" / "attention").glob("*.yaml")}
    assert set(BACKENDS) == options
