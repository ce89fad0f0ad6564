# call C: a fresh machine's start-up seen from inside (every Triton compile timed, the CPU time over
# the kernel warm-ups), then the cuBLASLt MLP's GPU tests.
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache  # as experiments/gpu.sh runs
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$gpu"; date -u
export TORCH_EXTENSIONS_DIR=/tmp/ext TRITON_CACHE_DIR=/tmp/triton; rm -rf /tmp/ext /tmp/triton
run() {  # name, then overrides
  local n=$1; shift
  timeout 120 python run.py experiment=speedrun train.progress=false hydra.run.dir=outputs/callC_$n "$@" > $OUT/callC_$n.log 2>&1
  echo "$n rc $?"; grep -E "startup [0-9]|warm-ups ended|reached at|median" $OUT/callC_$n.log | sed 's/^.*INFO [a-z._]*: //' | cut -c1-230
  cp outputs/callC_$n/results.json $OUT/callC_${n}_results.json 2>/dev/null; }
echo "== fresh machine: start-up from inside"
timeout 60 python experiments/results/h100-2026-12-07/logs/scratch/cold_diag.py experiment=speedrun train.progress=false logger=none train.max_iters=30 \
  train.profile=false hydra.run.dir=outputs/callC_diag > $OUT/callC_diag.log 2>&1; echo "diag rc $?"
grep -E "kernel warm-ups|compiles|startup [0-9]|warm-ups ended" $OUT/callC_diag.log | sed 's/^.*INFO [a-z._]*: //' | cut -c1-200
echo "== gpu tests: the cuBLASLt MLP"
timeout 45 python -m pytest -q -m gpu -p no:cacheprovider tests/test_cublaslt_mlp.py 2>&1 | tail -1
date -u
