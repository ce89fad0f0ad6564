# call 3: GPU tests; the cuBLASLt plans at the seed shape; one speedrun on a cold machine state (fresh
# extension and Triton caches); the whole lever sweep on warm caches, its report published; the bench gate
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python -c "import torch,triton;print(torch.__version__, triton.__version__)"
echo "== cold: fresh TORCH_EXTENSIONS_DIR and Triton cache"
export TORCH_EXTENSIONS_DIR=/tmp/ext_cold TRITON_CACHE_DIR=/tmp/triton_cold; rm -rf $TORCH_EXTENSIONS_DIR $TRITON_CACHE_DIR
timeout 150 python run.py experiment=speedrun train.progress=false logger=none hydra.run.dir=outputs/gpu_cold > $OUT/call3_cold.log 2>&1
echo rc $?; grep -E "reached at|startup |measured|Error" $OUT/call3_cold.log | cut -c1-200
echo "== gpu tests (warm caches from here)"
timeout 150 python -m pytest -q --no-header -m gpu -p no:cacheprovider tests/test_cublaslt_mlp.py tests/test_triton_tuned.py 2>&1 | tail -3
timeout 60 python - <<'PY'
import torch
from kernels import cublaslt_mlp as lt
x = torch.randn(16384, 384, device="cuda").bfloat16().requires_grad_()
w1 = (torch.randn(1536, 384, device="cuda") / 20).bfloat16().requires_grad_(); w2 = (torch.randn(384, 1536, device="cuda") / 40).bfloat16().requires_grad_()
lt.CublasLtGeluMLP.apply(x, w1, w2).backward(torch.randn(16384, 384, device="cuda").bfloat16())
torch.cuda.synchronize()
for p in lt._ext().plans(): print("plan epilogue,m,n,k,rank,us,us_first", p)
PY
echo "== lever sweep"
timeout 280 python run.py -m experiment=speedrun train.progress=false logger=none hydra.sweep.dir=outputs/gpu_sweep > $OUT/call3_sweep.log 2>&1
echo rc $?
grep -E "reached at|startup |profile:|^\s+\[|measured" $OUT/call3_sweep.log | cut -c1-200
tar czf $OUT/call3_sweep.tgz outputs/gpu_sweep; ls -la $OUT/call3_sweep.tgz
echo "== bench gate"
timeout 80 python run.py task=bench bench.target=train_step experiment=speedrun logger=none hydra.run.dir=outputs/gpu_bench3 > $OUT/call3_bench.log 2>&1
echo rc $?; grep -E "correct|measured|Error" $OUT/call3_bench.log | cut -c1-220 | tail -3
