# call 1: the speedrun's best settings from a fresh process on a fresh machine (cold builds), again
# warm, and the whole lever sweep; the bench gate at the seed shape and at n_embd 512 / 8 heads;
# the attention tuner's CLI into a scratch table; an A/B of wte-gradient forms
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
echo "== speedrun, fresh machine (empty extension and Triton caches)"
export TORCH_EXTENSIONS_DIR=/tmp/ext_cold TRITON_CACHE_DIR=/tmp/triton_cold; rm -rf $TORCH_EXTENSIONS_DIR $TRITON_CACHE_DIR
timeout 100 python run.py experiment=speedrun train.progress=false logger=none hydra.run.dir=outputs/gpu_cold > $OUT/call1_cold.log 2>&1
echo rc $?; grep -E "reached at|startup |measured|Error|error" $OUT/call1_cold.log | cut -c1-220 | head -8
echo "== speedrun, warm (W&B offline, as the quickstart runs it)"
timeout 60 python run.py experiment=speedrun hydra.run.dir=outputs/gpu_warm > $OUT/call1_warm.log 2>&1
echo rc $?; grep -E "reached at|startup |measured|Error|error" $OUT/call1_warm.log | cut -c1-220 | head -8
cp outputs/gpu_warm/results.json $OUT/call1_warm_results.json 2>/dev/null
echo "== wte gradient forms at 16,384 x 384 fp32 into 65 rows (us, median of do_bench)"
timeout 40 python - <<'PY'
import torch
from triton.testing import do_bench
N, C, V = 16384, 384, 65
torch.manual_seed(0)
idx = torch.randint(0, V, (N,), device="cuda"); g = torch.randn(N, C, device="cuda")
ref = torch.zeros(V, C, dtype=torch.float64, device="cuda").index_add_(0, idx, g.double())
def one_hot_grad(rows):
    oh = torch.zeros(N, rows, device="cuda").scatter_(1, idx[:, None], 1.0)
    return (oh.t() @ g)[:V]
forms = {f"one-hot {r} cols": (lambda r=r: one_hot_grad(r)) for r in (65, 68, 72, 128)}
forms["index_add_"] = lambda: torch.zeros(V, C, device="cuda").index_add_(0, idx, g)
for name, f in forms.items():
    err = (f().double() - ref).abs().max().item()
    print(f"{name:16s} max err {err:.2e}  {1e3 * do_bench(f, warmup=25, rep=200, return_mode='median'):.1f} us")
PY
echo "== lever sweep (warm caches)"
timeout 300 python run.py -m experiment=speedrun train.progress=false logger=none hydra.sweep.dir=outputs/gpu_sweep > $OUT/call1_sweep.log 2>&1
echo rc $?
grep -E "reached at|startup |measured" $OUT/call1_sweep.log | cut -c1-200
tar czf $OUT/call1_sweep.tgz outputs/gpu_sweep; ls -la $OUT/call1_sweep.tgz
echo "== bench gate, seed"
timeout 50 python run.py task=bench bench.target=train_step experiment=speedrun logger=none hydra.run.dir=outputs/b0 > $OUT/call1_bench_seed.log 2>&1
echo rc $?; grep -E "correct|measured|Error" $OUT/call1_bench_seed.log | cut -c1-220 | tail -3
echo "== bench gate, n_embd 512, 8 heads"
timeout 50 python run.py task=bench bench.target=train_step experiment=speedrun logger=none model.n_embd=512 model.n_head=8 hydra.run.dir=outputs/b1 > $OUT/call1_bench_512.log 2>&1
echo rc $?; grep -E "correct|measured|Error" $OUT/call1_bench_512.log | cut -c1-220 | tail -3
echo "== tuner CLI"
timeout 30 python -m kernels.tune_attention 2,2,64,64 --forward-only --table /tmp/t.json 2>&1 | tail -3
date -u
