# call A: the tied embedding's split-K gradients (kernel bench, then the step B A B A); the speedrun as gpu.sh runs it
# (fresh machine twice, warm twice); decode=persistent SPAN_FC 35 + STAGES 4 against the plan and decode=compiled
set -o pipefail
source .gpu/env.sh; export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%T
echo "== gpu tests: fused head (16,384 rows: the split path), model"
timeout 120 python -m pytest -q -m gpu -p no:cacheprovider tests/test_triton_head.py tests/test_model.py 2>&1 | tail -3
echo "== split-K kernel bench"
timeout 60 python .gpu/scratch/splitk_bench.py 2>&1 | tail -12
cp transformerop/model/gpt.py /tmp/new_gpt.py; cp kernels/triton_head.py /tmp/new_head.py
bench() {  # name
  timeout 100 python run.py task=bench bench.target=train_step experiment=speedrun logger=none \
    hydra.run.dir=outputs/callA_bench_$1 > $OUT/callA_bench_$1.log 2>&1
  echo "$1 rc $?"; grep -E "correct:|measured|gate|grad err" $OUT/callA_bench_$1.log | cut -c1-230 | head -4; }
echo "== train step B A B A (B: split-K, A: one matmul)"; date -u +%T
for r in 1 2; do
  bench B$r
  cp .gpu/scratch/old/gpt.py transformerop/model/gpt.py; cp .gpu/scratch/old/triton_head.py kernels/triton_head.py
  bench A$r
  cp /tmp/new_gpt.py transformerop/model/gpt.py; cp /tmp/new_head.py kernels/triton_head.py
done
cmp -s /tmp/new_gpt.py transformerop/model/gpt.py && cmp -s /tmp/new_head.py kernels/triton_head.py && echo "split-K files restored"
echo "== gpu.sh speedrun best"; date -u +%T
OUT=$OUT timeout 260 bash experiments/gpu.sh speedrun best > /dev/null 2>&1; echo "rc $?"
grep -E "startup [0-9]|warm-ups ended|reached|train_step" $OUT/speedrun_gpuall.log | sed 's/^.*INFO [a-z._]*: //' | cut -c1-200
for d in outputs/gpu_speedrun_*; do cp $d/results.json $OUT/$(basename $d)_results.json 2>/dev/null; done
timeout 20 python .gpu/scratch/kern.py outputs/gpu_speedrun_best1/results.json simt s1688 gemm_bf16 splitK Reduce reduce_kernel _bwd_kernel dgelu 2>&1 | head -24
sw() {  # name, timeout, args...
  local name=$1 t=$2; shift 2; echo "== $name"; date -u +%T
  timeout $t python run.py -m experiment=decode_speed "$@" logger=none train.progress=false \
    hydra.sweep.dir=outputs/callA/$name > $OUT/callA_$name.log 2>&1; echo "sweep rc $?"; python .gpu/scratch/rows.py outputs/callA/$name
}
sw p3x1 100 decode=persistent model=gpt_3x generate.batch_size=1 '++decode.tiles={},{SPAN_FC:35,STAGES:4}'
sw c3x1 70 decode=compiled model=gpt_3x generate.batch_size=1
sw p2x8 60 decode=persistent model=gpt_2x generate.batch_size=8
sw c2x8 70 decode=compiled model=gpt_2x generate.batch_size=8
tar czf $OUT/callA.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/callA outputs/callA_bench_* outputs/gpu_speedrun_* 2>/dev/null
date -u +%T
