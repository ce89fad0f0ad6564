"""decode=fused: the Triton decode step agrees with recompute token for token (fp32) and with the
static path's logits. On CPU the kernels run under TRITON_INTERPRET=1 in a subprocess (the
variable must be set before Triton is imported); on a GPU the step is also graph-captured."""
import os

import pytest
import torch
from conftest import interpreted, make_cfg

from transformerop.decode import Decoder, check
from transformerop.model import BackendUnavailable, build_model

CHECK = """
import torch
from omegaconf import OmegaConf
from transformerop.model import build_model
from transformerop.decode import Decoder
torch.manual_seed(0)
cfg = OmegaConf.create({{"model": {{"name": "gpt", "n_layer": 2, "n_head": 4, "n_embd": 32, "block_size": 16,
                                   "dropout": 0.0, "bias": True}}, "attention": {{"name": "sdpa"}}}})
big = OmegaConf.create({{"keep": None, "block_n": 32, "block_k": 128}})  # big tiles: few programs, fast here
small = OmegaConf.create({{"keep": None, "block_n": 1, "block_k": 16}})
m = build_model(cfg, 20).eval()
prompt = torch.randint(20, (2, 5))
run = {{}}
for path in ("recompute", "static", "fused"):
    logits = []
    out = Decoder(m, path, 2, 5 + 30, temperature=0, dcfg=big)(prompt, on_logits=lambda i, x: logits.append(x.clone()))
    run[path] = (out.clone(), torch.stack(logits))
g = lambda: torch.Generator().manual_seed(3)
sampled = [Decoder(m, p, 2, 40, temperature=0.8, top_k=5, dcfg=big)(prompt, g()).clone() for p in ("recompute", "fused")]
print("TOKENS", torch.equal(run["fused"][0], run["recompute"][0]))
print("LOGITS", (run["fused"][1] - run["static"][1]).abs().max().item())
print("SAMPLED", torch.equal(*sampled))
# other matvec tiles (decode.block_n / block_k): one output per program, several reduction chunks
tiled = []
Decoder(m, "fused", 2, 5 + 8, temperature=0, dcfg=small)(prompt, on_logits=lambda i, x: tiled.append(x.clone()))
print("TILES", (torch.stack(tiled) - run["static"][1][:len(tiled)]).abs().max().item())
"""


def test_fused_matches_recompute_under_the_triton_interpreter():
    lines = interpreted(CHECK.format(), timeout=600)
    assert lines["TOKENS"] == "True"  # 30 greedy tokens past block_size 16: the window re-prefills
    assert float(lines["LOGITS"]) < 1e-5
    assert lines["SAMPLED"] == "True"  # same seed, same Gumbel noise, same text
    assert float(lines["TILES"]) < 1e-5


def test_fused_needs_cuda_or_the_interpreter_and_a_gpt():
    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("this checks the CPU refusal")
    with pytest.raises(BackendUnavailable, match="decode=fused needs CUDA"):
        check(make_cfg("decode=fused"), torch.device("cpu"))
    with pytest.raises(ValueError, match="under an explicit mask, which attention=cuda refuses"):
        check(make_cfg("decode=fused", "attention=cuda"), torch.device("cuda"))
    from transformerop.config_check import check as check_config
    from transformerop.errors import ConfigError
    with pytest.raises(ConfigError, match="decode.block_n=3 is out of range: it must be >= 1 and a power of two"):
        check_config(make_cfg("decode=fused", "decode.block_n=3"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run `pytest -m gpu` on the device)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_graph_on_gpu_matches_recompute(dtype):
    torch.manual_seed(0)
    m = build_model(make_cfg("model=gpt", "model.dropout=0.0"), 65).cuda().eval().to(dtype)
    prompt = torch.randint(65, (1, 7), device="cuda")
    logs = {}
    for path in ("recompute", "fused"):
        logs[path] = []
        out = Decoder(m, path, 1, 7 + 300, temperature=0)(prompt, on_logits=lambda i, x: logs[path].append(x.float().clone()))  # fused: x is the graph's buffer
        logs[path + "_tokens"] = out.clone()
    if dtype == torch.float32:
        assert torch.equal(logs["fused_tokens"], logs["recompute_tokens"])  # 300 tokens, past block_size
    same = (logs["fused_tokens"] == logs["recompute_tokens"])[0, 7:].tolist()
    n = min(16, same.index(False) + 1 if False in same else 16)  # logits while both saw the same tokens
    ref, got = torch.stack(logs["recompute"][:n]), torch.stack(logs["fused"][:n])
    assert ((got - ref).abs().max() / ref.abs().max()).item() < (1e-3 if dtype == torch.float32 else 5e-2)
