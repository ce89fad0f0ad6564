# call 2 (branch oplib, the device time left for a short call): the cuBLASLt op library's cold
# build alone, its GPU tests, the speedrun on a fresh machine (empty extension and Triton caches),
# the DGELU layouts
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
S=experiments/results/h200-2026-12-06b/logs/scratch
echo "== cold: the cuBLASLt op library's build alone"
export TORCH_EXTENSIONS_DIR=/tmp/extA TRITON_CACHE_DIR=/tmp/tritonA; rm -rf $TORCH_EXTENSIONS_DIR $TRITON_CACHE_DIR
timeout 90 python -c "
import time, torch; torch.cuda.init(); t = time.perf_counter()
from kernels import cublaslt_mlp; cublaslt_mlp._ext(); print(f'cuBLASLt op library build + load: {time.perf_counter() - t:.2f} s')"
echo "== gpu tests: cuBLASLt MLP"
timeout 120 python -m pytest -q -m gpu tests/test_cublaslt_mlp.py 2>&1 | tail -4
echo "== speedrun, fresh machine (empty extension and Triton caches)"
export TORCH_EXTENSIONS_DIR=/tmp/extB TRITON_CACHE_DIR=/tmp/tritonB; rm -rf $TORCH_EXTENSIONS_DIR $TRITON_CACHE_DIR
timeout 100 python run.py experiment=speedrun train.progress=false train.profile=false logger=none hydra.run.dir=outputs/cold > $OUT/call2_cold.log 2>&1
echo rc $?; grep -E "reached at|startup |Error|error" $OUT/call2_cold.log | cut -c1-240 | head -6
echo "== DGELU layouts"
timeout 60 python $S/dgelu_bench.py 2>&1 | tail -12
date -u
