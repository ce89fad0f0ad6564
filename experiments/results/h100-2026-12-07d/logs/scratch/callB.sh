# call B: a fresh machine's start-up from inside with every Triton compile timed (empty Triton + extension
# caches); the tied embedding's split-K products over S
source .gpu/env.sh; export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%T
timeout 60 python -c "import torch, triton, hydra, wandb" 2>/dev/null  # bytecode written once, as after a pip install
for i in 1 2; do
  echo "== cold diag $i"; d=$(mktemp -d)
  TRITON_CACHE_DIR=$d/triton TORCH_EXTENSIONS_DIR=$d/ext timeout 100 python .gpu/scratch/cold_diag.py experiment=speedrun \
    train.max_iters=30 train.profile=false logger=none train.progress=false hydra.run.dir=outputs/callB_diag$i > $OUT/callB_diag$i.log 2>&1
  echo "rc $?"; grep -E "kernel warm-ups|compile |compiles|cuBLASLt C|startup [0-9]|warm-ups ended" $OUT/callB_diag$i.log | sed 's/^.*INFO [a-z._]*: //' | cut -c1-160
done
echo "== split-K over S"; date -u +%T
timeout 120 python .gpu/scratch/splitk_sweep.py 2>&1 | tail -30
date -u +%T
