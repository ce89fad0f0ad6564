# call 4 (short, device time nearly spent): the speedrun on a fresh machine's caches, then warm, as gpu.sh runs them
source .gpu/env.sh; export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%T
timeout 60 python -c "import torch, triton, hydra, wandb, setuptools" 2>/dev/null  # bytecode written once, as after a pip install
run() {  # name, extra env
  timeout 45 env $2 python run.py experiment=speedrun train.progress=false $3 hydra.run.dir=outputs/call4_$1 > $OUT/call4_$1.log 2>&1
  echo "$1 rc $?"; grep -E "startup [0-9]|warm-ups ended|reached at|train_step: measured" $OUT/call4_$1.log | sed 's/^.*INFO [a-z._]*: //' | cut -c1-170
  cp outputs/call4_$1/results.json $OUT/call4_$1_results.json 2>/dev/null; }
d=$(mktemp -d); run fresh1 "TRITON_CACHE_DIR=$d/triton TORCH_EXTENSIONS_DIR=$d/ext" logger=none
run warm1 "" ""
d=$(mktemp -d); run fresh2 "TRITON_CACHE_DIR=$d/triton TORCH_EXTENSIONS_DIR=$d/ext" logger=none
date -u +%T
