"""Scratch A/B: decode=persistent tok/s and phases for a few rows, in the tree on PYTHONPATH:
    PYTHONPATH=".:$PYTHONPATH" python3 bench_persist.py LABEL DCFG_JSON C,L,H,B ..."""
import json
import sys

import torch
from omegaconf import OmegaConf
from transformerop.model import build_model
from transformerop.decode import Decoder

label, pref = sys.argv[1], sys.argv[2]
rows = [tuple(int(x) for x in r.split(",")) for r in sys.argv[3:]]
for C, L, H, B in rows:
    cfg = OmegaConf.create({"model": {"name": "gpt", "n_layer": L, "n_head": H, "n_embd": C, "block_size": 256,
                                      "dropout": 0.0, "bias": True}, "attention": {"name": "sdpa"}})
    torch.manual_seed(0)
    m = build_model(cfg, 65).cuda().eval().to(torch.bfloat16)
    opts = json.loads(pref)
    bt = opts.pop("BT", None)  # a tile override: the cache's slot block
    opts_programs = opts.pop("programs", None)  # a grid of fewer programs than SMs
    plan_batch = opts.pop("plan_batch", None)  # the tiles planned as for this batch (2: tensor cores at batch 1)
    warps = opts.pop("warps", None)  # the tiles planned for this many warps a program (the budget scales with them)
    extra = opts.pop("tiles", {})  # any tile keys, over the plan's
    no_span = opts.pop("no_span", False)  # tiles of BN rows (SPAN = BN), as before spans
    dcfg = OmegaConf.create(opts)
    dec = Decoder(m, "persistent", B, 1 + 500, temperature=1.0, dcfg=dcfg)
    progs = opts_programs
    if progs:  # a smaller grid: re-plan for it
        from transformerop.decode.persistent import plan
        r = dec.runner
        r.programs = progs
        r.set_tiles(plan(C, H, 65, 256, B, progs, cost=str(dcfg.get("tile_cost", "bytes")),
                         proj=str(dcfg.get("attn_proj", "auto")), stages=int(dcfg.get("stages", 3)), elem=2))
    if plan_batch:
        from transformerop.decode.persistent import plan
        r = dec.runner
        r.set_tiles(plan(C, H, 65, 256, plan_batch, r.programs, cost=str(dcfg.get("tile_cost", "bytes")),
                         proj=str(dcfg.get("attn_proj", "auto")), stages=int(dcfg.get("stages", 3)), elem=2))
    if warps:
        from transformerop.decode.persistent import plan
        r = dec.runner
        r.set_tiles(plan(C, H, 65, 256, B, r.programs, num_warps=warps, cost=str(dcfg.get("tile_cost", "bytes")),
                         proj=str(dcfg.get("attn_proj", "auto")), stages=int(dcfg.get("stages", 3)), elem=2))
    if bt:
        dec.runner.tiles["BT"] = bt
    dec.runner.tiles.update(extra)
    if no_span:
        dec.runner.tiles.update(SPAN_QKV=dec.runner.tiles["BN_QKV"], SPAN_FC=dec.runner.tiles["BN_FC"])
    prompt = torch.zeros(B, 1, dtype=torch.long, device="cuda")
    g = torch.Generator(device="cuda")
    with torch.no_grad():
        dec(prompt, g.manual_seed(0))
        ts = []
        for r in range(5):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); dec(prompt, g.manual_seed(r)); e.record(); torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
        prof = dec.runner.phase_profile(dec, prompt)
    ts.sort()
    med = ts[2]
    ph = {k[9:]: round(v, 1) for k, v in prof.items() if k.startswith("phase_us_")}
    t = dec.runner.tiles
    print(f"ROW {label} {pref} programs={dec.runner.programs} STAGES={t['STAGES']} SHARED_O={t['SHARED_O']} C={C} B={B} {B * 500 / med * 1e3:,.0f} tok/s med {med:.3f} ms "
          f"(min {ts[0]:.3f} max {ts[-1]:.3f}) {ph}", flush=True)
