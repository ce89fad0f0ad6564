# call 4: split-K weight gradients (embedding one-hot, tied head): GPU tests, a micro-benchmark against the single
# matmuls, the bench gate of the best settings, two speedrun best rows and their whole kernel table
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python -c "import torch,triton;print(torch.__version__, triton.__version__)"
echo "== gpu tests"
timeout 150 python -m pytest -q --no-header -m gpu -p no:cacheprovider tests/test_split_k.py tests/test_triton_head.py tests/test_triton_tuned.py 2>&1 | tail -3
echo "== micro: a^T b, K 16384, (65 x 384)"
timeout 60 python - <<'PY'
import torch
from triton.testing import do_bench
from transformerop.model.split_k import at_b
for dt in (torch.bfloat16, torch.float32):
    a, b = torch.randn(16384, 65, device="cuda").to(dt), torch.randn(16384, 384, device="cuda").to(dt)
    ref = a.double().t() @ b.double()
    e1, e2 = ((f().double() - ref).abs().max().item() for f in (lambda: a.t() @ b, lambda: at_b(a, b)))
    t1 = do_bench(lambda: a.t() @ b, warmup=25, rep=200, return_mode="median", quantiles=None)
    q1 = do_bench(lambda: a.t() @ b, warmup=25, rep=200, quantiles=[0.25, 0.5, 0.75])
    q2 = do_bench(lambda: at_b(a, b), warmup=25, rep=200, quantiles=[0.25, 0.5, 0.75])
    print(f"{dt}: single matmul {1e3*q1[1]:.1f} us (p25-p75 {1e3*q1[0]:.1f}-{1e3*q1[2]:.1f}), err {e1:.2e} | split-K {1e3*q2[1]:.1f} us ({1e3*q2[0]:.1f}-{1e3*q2[2]:.1f}), err {e2:.2e}")
PY
echo "== bench gate"
timeout 80 python run.py task=bench bench.target=train_step experiment=speedrun logger=none hydra.run.dir=outputs/gpu_bench4 > $OUT/call4_bench.log 2>&1
echo rc $?; grep -E "correct|measured|Error" $OUT/call4_bench.log | cut -c1-220 | tail -3
echo "== speedrun best x2"
timeout 100 python run.py -m experiment=speedrun train.progress=false logger=none experiment/lever=best,best hydra.sweep.dir=outputs/gpu_sweep4 > $OUT/call4_speedrun.log 2>&1
echo rc $?; grep -E "reached at|startup |measured|profile:|Error" $OUT/call4_speedrun.log | cut -c1-200
python - <<'PY' > $OUT/call4_kernels.txt
import json
t = json.load(open("outputs/gpu_sweep4/1/results.json"))["tables"]["train_step_kernels"]
for r in t["rows"]: print("%8.1f %5.1f %7.2f %s" % (r[1], r[2], r[3], str(r[0])[:130]))
PY
head -24 $OUT/call4_kernels.txt
