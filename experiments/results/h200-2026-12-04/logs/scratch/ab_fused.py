"""Seed GPT, bf16, batch 1, 500 tokens: decode=megakernel with the projection fused into the
attention items (the plan's choice at batch 1) against proj tiles, same process, parity first."""
import json
import sys

import torch
from omegaconf import OmegaConf

from transformerop.decode import Decoder, timed_generation
from transformerop.decode.megakernel import Megakernel
from transformerop.decode.parity import parity
from transformerop.model import build_model

torch.manual_seed(0)
cfg = OmegaConf.create({"model": {"name": "gpt", "n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256,
                                  "dropout": 0.0, "bias": True}, "attention": {"name": "sdpa"}})
m = build_model(cfg, 65).cuda().to(torch.bfloat16).eval()
prompt = torch.zeros(1, 1, dtype=torch.long, device="cuda")
rows = {}
for fused in [None, False, None, False]:
    Megakernel.fused = fused
    dec = Decoder(m, "megakernel", 1, 501, temperature=1.0)
    gate = parity(m, dec, prompt, 100, "bfloat16", lambda: torch.Generator(device="cuda").manual_seed(1))
    stats, _ = timed_generation(dec, prompt, lambda: torch.Generator(device="cuda").manual_seed(1), torch.device("cuda"))
    key = "fused" if dec.runner.plan.fused else "tiles"
    ms = stats["median_ms"]
    rows.setdefault(key, []).append(round(500 / ms * 1e3))
    print(key, "tok/s", round(500 / ms * 1e3), "median_ms", round(ms, 3), "p25-p75", stats.get("p25_ms"),
          stats.get("p75_ms"), "parity_rel", f"{gate['parity_rel_logit_diff']:.2e}",
          "phases", json.dumps({k: round(v, 2) for k, v in dec.runner.phase_profile(dec, prompt).items()
                                if k.startswith("phase_us") or k == "barrier_us"}), flush=True)
print("RESULT", json.dumps(rows))
sys.exit(0)
