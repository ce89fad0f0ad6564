# call 3 (clean tree: the warm-up change + the shorter dropout mix): the warm-up change's fresh-cache start-up, A then B
# (after call 1's B A B), then the speedrun as gpu.sh runs it, then the GPU tests call 1 and 2 did not reach
source .gpu/env.sh; export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%T
git diff --stat HEAD 2>/dev/null | tail -1
timeout 60 python -c "import torch, triton, hydra, wandb, setuptools" 2>/dev/null
cp transformerop/model/attention/triton.py /tmp/new_attn.py
diag() {  # name
  local d; d=$(mktemp -d)
  TRITON_CACHE_DIR=$d/triton TORCH_EXTENSIONS_DIR=$d/ext timeout 40 python .gpu/scratch/cold_diag.py experiment=speedrun \
    train.max_iters=30 train.profile=false logger=none train.progress=false hydra.run.dir=outputs/call3_diag_$1 > $OUT/call3_diag_$1.log 2>&1
  echo "$1 rc $?"; grep -E "kernel warm-ups|compile _(fwd|bwd)_kernel|compiles,|startup [0-9]|warm-ups ended" $OUT/call3_diag_$1.log | sed 's/^.*INFO [a-z._]*: //' | cut -c1-150; }
echo "== gpu.sh speedrun best"; date -u +%T
OUT=$OUT/gpu timeout 200 bash experiments/gpu.sh speedrun best > $OUT/speedrun_console.log 2>&1; echo "rc $?"
grep -E "startup [0-9]|warm-ups ended|reached at|train_step: measured" $OUT/speedrun_console.log | sed 's/^.*INFO [a-z._]*: //' | cut -c1-170
tar czf $OUT/call3.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/call3_diag_* outputs/gpu_speedrun_* 2>/dev/null
cp .gpu/scratch/old/attn_triton.py transformerop/model/attention/triton.py; diag A2; cp /tmp/new_attn.py transformerop/model/attention/triton.py
echo "== GPU tests"; date -u +%T
timeout 30 python -m pytest -q -m gpu -p no:cacheprovider tests/test_triton_attention.py tests/test_triton_attention_op.py \
  tests/test_triton_head.py tests/test_triton_mlp.py tests/test_triton_tuned.py tests/test_train_graph.py -v -rfE > $OUT/call3_gpu_tests.log 2>&1
echo "rc $?"; grep -c PASSED $OUT/call3_gpu_tests.log; grep -E "FAILED|ERROR" $OUT/call3_gpu_tests.log | head; tail -3 $OUT/call3_gpu_tests.log
date -u +%T
