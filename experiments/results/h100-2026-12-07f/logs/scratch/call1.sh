# call 1: the fused norm backward's tile sweep; the speedrun fresh / warm (profiled: the step's whole kernel list) / fresh
source .gpu/env.sh; export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%T
timeout 60 python -c "import torch, triton, hydra, wandb, setuptools; print(torch.__version__, triton.__version__)"
echo "== norm + dropout GPU tests"
timeout 120 python -m pytest -v -p no:cacheprovider -m gpu tests/test_triton_norm.py tests/test_dropout_hash.py > $OUT/c1_tests.log 2>&1
echo "rc $?"; grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/c1_tests.log | tail -12
echo "== norm backward sweep"; date -u +%T
timeout 200 python .gpu/scratch/norm_bwd_sweep.py > $OUT/c1_norm_sweep.log 2>&1; echo "rc $?"
grep shipped $OUT/c1_norm_sweep.log; grep " us " $OUT/c1_norm_sweep.log | sort -t: -k2 -n | head -10; grep -c FAILED $OUT/c1_norm_sweep.log
run() {  # name, env, script
  timeout 60 env $2 python $3 experiment=speedrun train.progress=false logger=none hydra.run.dir=outputs/c1_$1 > $OUT/c1_$1.log 2>&1
  echo "$1 rc $?"; grep -E "startup [0-9]|warm-ups ended|reached at|profile:" $OUT/c1_$1.log | sed 's/^.*INFO [a-z._]*: //' | cut -c1-200
  cp outputs/c1_$1/results.json $OUT/c1_$1_results.json 2>/dev/null; }
echo "== speedrun"; date -u +%T
d=$(mktemp -d); run fresh1 "TRITON_CACHE_DIR=$d/triton TORCH_EXTENSIONS_DIR=$d/ext" run.py
run warm_prof "" ".gpu/scratch/prof_step.py step_kernels"
d=$(mktemp -d); run fresh2 "TRITON_CACHE_DIR=$d/triton TORCH_EXTENSIONS_DIR=$d/ext" run.py
date -u +%T
