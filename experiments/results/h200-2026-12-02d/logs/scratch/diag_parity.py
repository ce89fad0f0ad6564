"""Scratch: the GPU test's 384-wide batch-8 bf16 case -- how many of 150 greedy tokens agree with
recompute, the relative logit difference, and the float64 model's gap at the first divergence,
for the plan's tiles and with SPAN = BN."""
import torch
from omegaconf import OmegaConf
from transformerop.decode import Decoder
from transformerop.decode.parity import parity, _near_tie
from transformerop.model import build_model
for C, L, H, batch in ((384, 6, 6, 8), (768, 4, 12, 4), (768, 4, 12, 8)):
    for label in ("plan", "no_span", "no_ahead"):
        torch.manual_seed(0)
        cfg = OmegaConf.create({"model": {"name": "gpt", "n_layer": L, "n_head": H, "n_embd": C, "block_size": 64,
                                          "dropout": 0.0, "bias": C == 384}, "attention": {"name": "sdpa"}})
        m = build_model(cfg, 65).cuda().eval().to(torch.bfloat16)
        prompt = torch.randint(65, (batch, 7), device="cuda")
        dec = Decoder(m, "persistent", batch, 7 + 150, temperature=0, dcfg=OmegaConf.create({"attn_proj": "row" if C == 384 else "auto"}))
        t = dec.runner.tiles
        if label == "no_span":
            t.update(SPAN_QKV=t["BN_QKV"], SPAN_FC=t["BN_FC"])
        if label == "no_ahead":
            t.update(AHEAD=False)
        g = parity(m, dec, prompt, 150, "bfloat16")
        agree = g["parity_tokens_agree"]
        gap = None
        if agree < 150:
            ref = Decoder(m, "recompute", batch, 7 + 150, temperature=0)
            rt = ref(prompt)[:, 7:]
            mt = dec(prompt)[:, 7:]
            b = int((mt[:, agree] != rt[:, agree]).nonzero()[0])
            ctx = torch.cat([prompt[b:b + 1], rt[b:b + 1, :agree]], 1)[:, -64:]
            gap = _near_tie(m, ctx, int(mt[b, agree]), int(rt[b, agree]), 0.0, None)
        print(f"DIAG {C} b{batch} {label} agree {agree} rel {g['parity_rel_logit_diff']:.2e} tol {g['parity_tolerance']} gap64 {gap}", flush=True)
