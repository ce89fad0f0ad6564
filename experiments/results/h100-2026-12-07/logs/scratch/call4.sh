# call 4 (main): the cuBLASLt op library (W2 as stored only) built cold, its GPU tests;
# the attention backward's tiles at the train step's shape (scratch/attn_bwd_grid.py),
# then the step's bench with the shipped tile and, if the grid found a faster one (scratch/pick_bwd.py),
# with that one (written into this device's copy of kernels/triton_tuned.json)
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
S=experiments/results/h200-2026-12-06c/logs/scratch
export TORCH_EXTENSIONS_DIR=/tmp/ext TRITON_CACHE_DIR=/tmp/triton; rm -rf /tmp/ext /tmp/triton
echo "== cold: the cuBLASLt op library's build alone"
timeout 90 python -c "
import time, torch; torch.cuda.init(); t = time.perf_counter()
from kernels import cublaslt_mlp; cublaslt_mlp._ext(); print(f'cuBLASLt op library build + load: {time.perf_counter() - t:.2f} s')" 2>&1 | tail -1
echo "== gpu tests: cuBLASLt MLP, cuda_early"
timeout 150 python -m pytest -q -m gpu tests/test_cublaslt_mlp.py tests/test_cuda_early.py > $OUT/call4_gpu_tests.log 2>&1; tail -1 $OUT/call4_gpu_tests.log
echo "== attention backward tiles (B 64, H 6, T 256, D 64, bf16)"
timeout 100 python $S/attn_bwd_grid.py > $OUT/call4_attn_bwd_grid.log 2>&1; echo rc $?
grep "^shipped" $OUT/call4_attn_bwd_grid.log; grep " OK " $OUT/call4_attn_bwd_grid.log | awk '{for (i = 1; i <= NF; i++) if ($i == "us") print $(i - 1), $0}' | sort -n | head -8
grep -c "failed\|BAD" $OUT/call4_attn_bwd_grid.log
echo "== the train step (bench: gradient gate, then timing), B A B A: A the shipped backward tile, B the grid's fastest"
cp kernels/triton_tuned.json /tmp/tuned_shipped.json
bench() { timeout 60 python run.py task=bench bench.target=train_step experiment=speedrun logger=none hydra.run.dir=outputs/bench_$1 > $OUT/call4_bench_$1.log 2>&1
  echo "$1 rc $?"; grep -E "correct:|measured" $OUT/call4_bench_$1.log | cut -c1-200; }
if python $S/pick_bwd.py $OUT/call4_attn_bwd_grid.log; then
  cp kernels/triton_tuned.json /tmp/tuned_new.json
  for r in 1 2; do
    cp /tmp/tuned_new.json kernels/triton_tuned.json; bench B$r
    cp /tmp/tuned_shipped.json kernels/triton_tuned.json; bench A$r
  done
  cp /tmp/tuned_new.json $OUT/call4_triton_tuned_B.json
else
  bench A1
fi
date -u
