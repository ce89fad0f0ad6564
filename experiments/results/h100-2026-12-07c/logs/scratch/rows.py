"""One line a job of the sweeps given: its overrides, status, tok/s, parity, phases (µs a step)."""
import glob
import json
import sys

for sweep in sys.argv[1:]:
    for f in sorted(glob.glob(f"{sweep}/*/results.json"), key=lambda p: int(p.split("/")[-2])):
        r = json.load(open(f))
        m = r.get("metrics", {})
        ov = " ".join(o for o in r.get("overrides", []) if not o.startswith(("logger", "train.progress", "hydra")))
        ph = " ".join(f"{k[9:]}={m[k]:.1f}" for k in m if k.startswith("phase_us_") and k != "phase_us_per_token")
        print(f"ROW {sweep.split('/')[-1]}/{f.split('/')[-2]} {r.get('status')} tok/s={m.get('decode_tok_per_s', 0):,.0f} "
              f"parity={m.get('parity_tokens_agree')}/{m.get('parity_tokens')} {ph} | {ov} {r.get('error') or ''}"[:400])
