# call 4 (main): the cuBLASLt op library (W2 as stored only) built cold, its GPU tests; the attention
# backward's tiles at the train step's shape (scratch/attn_bwd_grid.py); the speedrun twice
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
timeout 180 python $S/attn_bwd_grid.py > $OUT/call4_attn_bwd_grid.log 2>&1; echo rc $?
grep "^shipped" $OUT/call4_attn_bwd_grid.log; grep " OK " $OUT/call4_attn_bwd_grid.log | awk '{for (i = 1; i <= NF; i++) if ($i == "us") print $(i - 1), $0}' | sort -n | head -8
grep -c "failed\|BAD" $OUT/call4_attn_bwd_grid.log
echo "== speedrun, fresh process (caches filled by the runs above, except the speedrun's own other kernels)"
for i in 1 2; do
  timeout 60 python run.py experiment=speedrun train.progress=false train.profile=false logger=none hydra.run.dir=outputs/run$i > $OUT/call4_run$i.log 2>&1
  echo rc $?; grep -E "reached at|startup |warm-ups" $OUT/call4_run$i.log | cut -c1-200
done
date -u
