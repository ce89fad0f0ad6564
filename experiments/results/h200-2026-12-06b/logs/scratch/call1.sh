# call 1 (branch oplib): the cuBLASLt op library's cold build alone; its GPU tests; the DGELU
# layouts; the speedrun on a fresh machine (empty extension and Triton caches), then warm once; a start-up A/B of two changes (scratch/startup_ab.py, three rounds, each run a fresh
# process); the main thread's start-up under cProfile (warm)
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; nproc
S=experiments/results/h200-2026-12-06b/logs/scratch
echo "== cold: the cuBLASLt op library's build alone"
export TORCH_EXTENSIONS_DIR=/tmp/extA TRITON_CACHE_DIR=/tmp/tritonA; rm -rf $TORCH_EXTENSIONS_DIR $TRITON_CACHE_DIR
timeout 120 python -c "
import time, torch; torch.cuda.init(); t = time.perf_counter()
from kernels import cublaslt_mlp; cublaslt_mlp._ext(); print(f'cuBLASLt op library build + load: {time.perf_counter() - t:.2f} s')"
echo "== gpu tests: cuBLASLt MLP"
timeout 240 python -m pytest -q -m gpu tests/test_cublaslt_mlp.py tests/test_cuda_early.py 2>&1 | tail -4
echo "== DGELU layouts"
timeout 90 python $S/dgelu_bench.py 2>&1 | tail -12
echo "== speedrun, fresh machine (empty extension and Triton caches)"
export TORCH_EXTENSIONS_DIR=/tmp/extB TRITON_CACHE_DIR=/tmp/tritonB; rm -rf $TORCH_EXTENSIONS_DIR $TRITON_CACHE_DIR
timeout 120 python run.py experiment=speedrun train.progress=false logger=none hydra.run.dir=outputs/cold > $OUT/call1_cold.log 2>&1
echo rc $?; grep -E "reached at|startup |Error|error" $OUT/call1_cold.log | cut -c1-240 | head -6
echo "== start-up A/B (warm caches, launch -> first step, three rounds)"
for r in 1 2 3; do for v in base warmup1 nosdpa both; do
  timeout 30 python $S/startup_ab.py $v experiment=speedrun train.progress=false logger=none hydra.run.dir=outputs/ab > $OUT/ab.log 2>&1
  grep "^AB" $OUT/ab.log || { echo "AB $v rc $?"; tail -3 $OUT/ab.log; }
done; done | tee $OUT/call1_ab.txt
rm -f $OUT/ab.log
for i in 1; do
  echo "== warm speedrun $i"
  timeout 45 python run.py experiment=speedrun hydra.run.dir=outputs/warm$i > $OUT/call1_warm$i.log 2>&1
  echo rc $?; grep -E "reached at|startup |warm-ups ended|Error|error" $OUT/call1_warm$i.log | cut -c1-240 | head -4
done
cp outputs/warm1/results.json $OUT/call1_warm1_results.json 2>/dev/null
echo "== start-up under cProfile (warm, main thread, launch to the first step's end)"
timeout 60 python $S/startup_prof.py experiment=speedrun train.progress=false train.profile=false logger=none hydra.run.dir=outputs/prof > $OUT/call1_prof.log 2>&1
echo rc $?; grep -E "startup |^span" $OUT/call1_prof.log | cut -c1-240
python - > $OUT/call1_startup_profile.txt <<'PY'
import os, pstats
p = pstats.Stats(os.environ["OUT"] + "/startup.prof")
p.sort_stats("cumulative").print_stats(70)
p.sort_stats("tottime").print_stats(30)
PY
head -120 $OUT/call1_startup_profile.txt | tail -95 | cut -c1-200
rm -f $OUT/startup.prof
date -u
