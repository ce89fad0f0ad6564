# call 4 (main): the cuBLASLt op library (W2 as stored only) built cold, its GPU tests; the attention
# backward's tiles at the train step's shape (scratch/attn_bwd_grid.py); the speedrun's lever sweep
# (each row a fresh process) for the study's report
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
echo "== speedrun: one run to fill the caches, then the lever sweep"
timeout 90 python run.py experiment=speedrun train.progress=false train.profile=false logger=none hydra.run.dir=outputs/fill > $OUT/call4_fill.log 2>&1
echo rc $?; grep -E "reached at|startup " $OUT/call4_fill.log | cut -c1-200
timeout 300 python run.py -m experiment=speedrun train.progress=False logger=none hydra.sweep.dir=outputs/sweep > $OUT/call4_sweep.log 2>&1
echo rc $?; tail -4 $OUT/call4_sweep.log | cut -c1-200
cp -r outputs/sweep $OUT/call4_speedrun
date -u
