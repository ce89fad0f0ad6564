"""Reads attn_bwd_grid.py's log; if its fastest correct query-tile backward config beats the shipped
one by more than 3%, writes it into kernels/triton_tuned.json (this device's copy of the tree) for
the train step's key and exits 0, else exits 1. The bench that follows then runs the step with it."""
import json
import re
import sys
from pathlib import Path

import torch

KEY = "bwd|bfloat16|256|256|512|64|True|tf32|True"  # B*H 384 -> bucket 512, T 256, D 64, causal, dropout
rows = []
for line in Path(sys.argv[1]).read_text().splitlines():
    m = re.match(r"(?:shipped )?(\d+)x(\d+) w(\d+) s(\d+)\s+query_tiles err \S+ OK\s+([\d.]+) us", line)
    if m:
        rows.append((float(m.group(5)), line.startswith("shipped"), tuple(map(int, m.groups()[:4]))))
shipped = next(us for us, is_shipped, _ in rows if is_shipped)
us, _, (bm, bn, w, s) = min(rows)
print(f"shipped {shipped:.1f} us; fastest {bm}x{bn} w{w} s{s} {us:.1f} us ({shipped / us:.3f}x)")
if us > shipped / 1.03:
    sys.exit(1)
table_path = Path("kernels/triton_tuned.json")
table = json.loads(table_path.read_text())
table["sm_90"][KEY] = dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s, gpu=torch.cuda.get_device_name())
table_path.write_text(json.dumps(table, indent=1))
print("wrote", KEY, table["sm_90"][KEY])
