"""Scratch A/B: decode=persistent tok/s for a few rows with plan-key overrides, each gated first by the
bf16 parity check against recompute (300 sampled tokens, past block_size 256); "dot_plan": true in
TILES_JSON starts from plan(..., dot=True) (the tensor-core form at this batch), the other keys on top:
    python3 .gpu/bench_tiles.py LABEL TILES_JSON C,L,H,B ..."""
import json
import sys
import time

import torch
from omegaconf import OmegaConf
from transformerop.model import build_model
from transformerop.decode import Decoder
from transformerop.decode.parity import parity

label, extra = sys.argv[1], json.loads(sys.argv[2])
rows = [tuple(int(x) for x in r.split(",")) for r in sys.argv[3:]]
for C, L, H, B in rows:
    t0 = time.time()
    cfg = OmegaConf.create({"model": {"name": "gpt", "n_layer": L, "n_head": H, "n_embd": C, "block_size": 256,
                                      "dropout": 0.0, "bias": True}, "attention": {"name": "sdpa"}})
    torch.manual_seed(0)
    m = build_model(cfg, 65).cuda().eval().to(torch.bfloat16)
    with torch.no_grad():  # non-trivial LayerNorm parameters
        for name, p in m.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    dec = Decoder(m, "persistent", B, 1 + 500, temperature=1.0)
    over = dict(extra)
    if over.pop("dot_plan", False):
        from transformerop.decode.persistent import plan
        dec.runner.set_tiles(plan(C, H, 65, 256, B, dec.runner.programs, dot=True))
    dec.runner.tiles.update(over)
    g = torch.Generator(device="cuda")
    try:
        gate = parity(m, dec, torch.zeros(B, 1, dtype=torch.long, device="cuda"), 300, "bfloat16",
                      seeded=lambda: g.manual_seed(11))
        gate = f"agree={gate['parity_tokens_agree']}/300 rel={gate['parity_rel_logit_diff']:.2e}"
    except Exception as e:  # noqa: BLE001 -- the row is still timed, marked
        gate = f"PARITY_FAIL {str(e)[:200]}"
    prompt = torch.zeros(B, 1, dtype=torch.long, device="cuda")
    with torch.no_grad():
        dec(prompt, g.manual_seed(0))
        ts = []
        for r in range(7):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); dec(prompt, g.manual_seed(r)); e.record(); torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
        prof = dec.runner.phase_profile(dec, prompt)
    ts.sort()
    med = ts[3]
    ph = {k[9:]: round(v, 1) for k, v in prof.items() if k.startswith("phase_us_")}
    t = dec.runner.tiles
    print(f"ROW {label} {json.dumps(extra)} C={C} L={L} B={B} STAGES={t['STAGES']} {B * 500 / med * 1e3:,.0f} tok/s "
          f"med {med:.3f} ms (min {ts[0]:.3f} max {ts[-1]:.3f}) {gate} {ph} [{time.time() - t0:.0f}s]", flush=True)
