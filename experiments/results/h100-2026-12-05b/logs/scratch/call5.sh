# call 5: the cuBLASLt plans with up to 32 candidates timed; GPU tests; the bench gate; two speedrun best rows
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python -c "import torch,triton;print(torch.__version__, triton.__version__)"
echo "== gpu tests"
timeout 150 python -m pytest -q --no-header -m gpu -p no:cacheprovider tests/test_cublaslt_mlp.py 2>&1 | tail -2
timeout 60 python - <<'PY'
import torch
from kernels import cublaslt_mlp as lt
x = torch.randn(16384, 384, device="cuda").bfloat16().requires_grad_()
w1 = (torch.randn(1536, 384, device="cuda") / 20).bfloat16().requires_grad_(); w2 = (torch.randn(384, 1536, device="cuda") / 40).bfloat16().requires_grad_()
lt.CublasLtGeluMLP.apply(x, w1, w2).backward(torch.randn(16384, 384, device="cuda").bfloat16())
torch.cuda.synchronize()
for p in lt._ext().plans(): print("plan epilogue,m,n,k,rank,candidates,us,us_first", p)
PY
echo "== bench gate"
timeout 80 python run.py task=bench bench.target=train_step experiment=speedrun logger=none hydra.run.dir=outputs/gpu_bench5 > $OUT/call5_bench.log 2>&1
echo rc $?; grep -E "correct|measured|Error" $OUT/call5_bench.log | cut -c1-220 | tail -3
echo "== speedrun best x2"
timeout 100 python run.py -m experiment=speedrun train.progress=false logger=none experiment/lever=best,best hydra.sweep.dir=outputs/gpu_sweep5 > $OUT/call5_speedrun.log 2>&1
echo rc $?; grep -E "reached at|startup |measured|profile:|Error|dgelu|geluaux" $OUT/call5_speedrun.log | cut -c1-200
