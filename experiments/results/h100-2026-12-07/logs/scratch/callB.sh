# call B: the cuBLASLt C library (no torch headers) built cold and its GPU tests; a fresh machine's
# speedrun (empty extension + Triton caches) with and without model.cublaslt_mlp, warm runs, the step's bench
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache  # as experiments/gpu.sh runs
git rev-parse --short HEAD; git status --short | head -3; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
export TORCH_EXTENSIONS_DIR=/tmp/ext TRITON_CACHE_DIR=/tmp/triton; rm -rf /tmp/ext /tmp/triton
echo "== cold: the cuBLASLt C library's build alone"
timeout 90 python -c "
import time, torch; torch.cuda.init(); t = time.perf_counter()
from kernels import cublaslt_mlp, cuda_build; cublaslt_mlp._ext(); print(f'cuBLASLt C library build + load: {time.perf_counter() - t:.2f} s', cuda_build.build_info(cublaslt_mlp.EXTENSION))" 2>&1 | tail -2
echo "== gpu tests: cuBLASLt MLP, cuda_early, kernel warm-ups"
timeout 240 python -m pytest -q -m gpu -p no:cacheprovider tests/test_cublaslt_mlp.py tests/test_cuda_early.py tests/test_kernel_warmups.py > $OUT/callB_gpu_tests.log 2>&1; tail -1 $OUT/callB_gpu_tests.log
run() {  # name, then overrides
  local n=$1; shift
  timeout 120 python run.py experiment=speedrun train.progress=false hydra.run.dir=outputs/callB_$n "$@" > $OUT/callB_$n.log 2>&1
  echo "$n rc $?"; grep -E "startup [0-9]|warm-ups ended|reached at" $OUT/callB_$n.log | sed 's/^.*INFO [a-z._]*: //' | cut -c1-230
  cp outputs/callB_$n/results.json $OUT/callB_${n}_results.json 2>/dev/null; }
echo "== fresh machine (empty extension + Triton caches), logger=none: without the cuBLASLt MLP, then with it twice"
rm -rf /tmp/ext /tmp/triton; run cold_no_cublaslt logger=none model.cublaslt_mlp=false
rm -rf /tmp/ext /tmp/triton; run cold1 logger=none
rm -rf /tmp/ext /tmp/triton; run cold2 logger=none
echo "== warm caches, W&B offline as the quickstart runs it"
run warm1; run warm2
echo "== the train step: gradient gate, then timing"
timeout 90 python run.py task=bench bench.target=train_step experiment=speedrun logger=none hydra.run.dir=outputs/callB_bench > $OUT/callB_bench.log 2>&1
echo "bench rc $?"; grep -E "correct:|measured" $OUT/callB_bench.log | cut -c1-220
date -u
