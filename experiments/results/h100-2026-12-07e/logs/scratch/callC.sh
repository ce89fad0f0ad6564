# call C (trimmed to the device time left): attention=triton's backward warm-up as a call of its own (B) against through autograd after the forward
# (A, the file before c9ffc19), each on a fresh machine's caches (empty Triton + extension dirs), B A B, every
# compile timed from inside; then one fresh-machine speedrun with B to the target
source .gpu/env.sh; export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%T
timeout 60 python -c "import torch, triton, hydra, wandb, setuptools" 2>/dev/null  # bytecode written once, as after a pip install
cp transformerop/model/attention/triton.py /tmp/new_attn.py
diag() {  # name
  local d; d=$(mktemp -d)
  TRITON_CACHE_DIR=$d/triton TORCH_EXTENSIONS_DIR=$d/ext timeout 40 python .gpu/scratch/cold_diag.py experiment=speedrun \
    train.max_iters=30 train.profile=false logger=none train.progress=false hydra.run.dir=outputs/callC_diag_$1 > $OUT/callC_diag_$1.log 2>&1
  echo "$1 rc $?"; grep -E "kernel warm-ups|compile _(fwd|bwd)_kernel|compiles,|startup [0-9]|warm-ups ended" $OUT/callC_diag_$1.log | sed 's/^.*INFO [a-z._]*: //' | cut -c1-150; }
diag B1
cp .gpu/scratch/old/attn_triton.py transformerop/model/attention/triton.py; diag A1; cp /tmp/new_attn.py transformerop/model/attention/triton.py
diag B2
cmp -s /tmp/new_attn.py transformerop/model/attention/triton.py && echo "B restored"
for i in 1; do
  echo "== fresh machine speedrun $i"; d=$(mktemp -d)
  TRITON_CACHE_DIR=$d/triton TORCH_EXTENSIONS_DIR=$d/ext timeout 45 python run.py experiment=speedrun train.progress=false \
    logger=none hydra.run.dir=outputs/callC_fresh$i > $OUT/callC_fresh$i.log 2>&1
  echo "rc $?"; grep -E "startup [0-9]|warm-ups ended|reached at|train_step: measured" $OUT/callC_fresh$i.log | sed 's/^.*INFO [a-z._]*: //' | cut -c1-170
  cp outputs/callC_fresh$i/results.json $OUT/callC_fresh${i}_results.json
done
date -u +%T
