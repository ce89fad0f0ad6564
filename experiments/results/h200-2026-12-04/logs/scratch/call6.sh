#!/usr/bin/env bash
# Call 6: the path keeps only the vectors it reads (the matrices live in the packed streams): the
# megakernel GPU tests and the seed batch-1 row.
set -o pipefail
export PYTHONUNBUFFERED=1
out="${OUT:-outputs}"
timeout 200 python3 -c "
import time; t = time.time()
from kernels import megakernel, cuda_build
megakernel.load(); print('build', cuda_build.build_info(megakernel.EXTENSION), round(time.time() - t, 1))" 2>&1 | tee "$out/build.log"
timeout 360 python3 -m pytest -q -m gpu tests/test_megakernel.py -p no:cacheprovider 2>&1 | tee "$out/tests.log"
dir=outputs/mk_call6/gpt_b1
timeout 150 python3 run.py experiment=decode_speed decode=megakernel model=gpt generate.batch_size=1 \
  logger=none train.progress=false hydra.run.dir=$dir > "$out/runs.log" 2>&1
python3 - "$dir" <<'PY' 2>&1 | tee -a "$out/rows.log"
import json, sys
r = json.load(open(sys.argv[1] + "/results.json"))
m = r.get("metrics", {})
keys = ["decode_tok_per_s", "ms_per_token", "phase_us_attn", "phase_us_mlp", "phase_us_head", "barrier_us",
        "phase_us_per_token", "weights_resident", "fused_proj", "parity_tokens_agree", "parity_rel_logit_diff"]
print(sys.argv[1], r["status"], str(r.get("error") or "")[-300:], {k: m.get(k) for k in keys}, r["env"].get("git_sha"))
PY
