"""Scratch: decode=persistent's phases split into their steps (clock64 per program, summed over the run),
for the tree in .gpu/sub: PYTHONPATH=".gpu/sub:.:$PYTHONPATH" python3 .gpu/sub_bench.py LABEL DCFG_JSON C,L,H,B ..."""
import json
import sys

import torch
from omegaconf import OmegaConf
from transformerop.model import build_model
from transformerop.decode import Decoder

NAMES = {0: "qkv.stats", 1: "qkv.tiles", 2: "attn.wait_qkv", 3: "attn.head_attention", 4: "proj.wait_y", 5: "proj.tiles",
         6: "mlp.stats", 7: "mlp.fc", 8: "mlp.proj", 9: "loads_between_arrive_and_leave", 10: "barrier_wait(leave)",
         11: "arrive", 12: "head.stats", 13: "head.tiles", 14: "sample"}
S = 32  # slots a program (.gpu/sub: 30 = globaltimer ns over the run, 31 = clock64 cycles)
label, pref = sys.argv[1], sys.argv[2]
rows = [tuple(int(x) for x in r.split(",")) for r in sys.argv[3:]]
for C, L, H, B in rows:
    cfg = OmegaConf.create({"model": {"name": "gpt", "n_layer": L, "n_head": H, "n_embd": C, "block_size": 256,
                                      "dropout": 0.0, "bias": True}, "attention": {"name": "sdpa"}})
    torch.manual_seed(0)
    m = build_model(cfg, 65).cuda().eval().to(torch.bfloat16)
    opts = json.loads(pref)
    bt = opts.pop("BT", None)
    dcfg = OmegaConf.create(opts)
    dec = Decoder(m, "persistent", B, 1 + 500, temperature=1.0, dcfg=dcfg)
    if bt:
        dec.runner.tiles["BT"] = bt
    prompt = torch.zeros(B, 1, dtype=torch.long, device="cuda")
    g = torch.Generator(device="cuda")
    r = dec.runner
    with torch.no_grad():
        dec(prompt, g.manual_seed(0))
        prof = r.phase_profile(dec, prompt)
    P = r.programs
    subs = torch.stack([b[-P * S:].view(P, S) for b in r.last_stamps]).double()  # (launches, P, 16)
    steps = prof["phase_steps"] + len(r.last_stamps)  # phase_times counts differences: one fewer a launch
    ghz = (subs[:, :, 31].sum() / subs[:, :, 30].sum()).item()  # clock64 cycles per ns
    tot = subs[:, :, :15].sum(0) / steps / ghz / 1e3  # (P, 15) us a step
    ph = {k[9:]: round(v, 1) for k, v in prof.items() if k.startswith("phase_us_")}
    print(f"SUB {label} {pref} C={C} L={L} B={B} tiles={r.tiles} clock {ghz:.3f} GHz phases {ph} "
          f"barrier_us {prof['barrier_us']:.2f}", flush=True)
    for j, n in NAMES.items():
        col = tot[:, j]
        print(f"SUB   {n:22s} mean {col.mean().item():8.2f}  max {col.max().item():8.2f}  p0 {col[0].item():8.2f}"
              f"  per-layer mean {col.mean().item() / (L if j < 12 else 1):7.3f} us/step", flush=True)
