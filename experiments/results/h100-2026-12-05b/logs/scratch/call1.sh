# call 1: cuBLASLt GPU tests (with the float32 fallback); speedrun rows best, cublaslt_mlp, attention_triton, best; bench gates best and cublaslt; the attention's tuned configs
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python -c "import torch,triton;print(torch.__version__, triton.__version__)"; git log --oneline -1
echo "== gpu tests"
timeout 150 python -m pytest -q --no-header -m gpu -p no:cacheprovider tests/test_cublaslt_mlp.py 2>&1 | tee $OUT/call1_tests.log | tail -8
echo "== speedrun rows"
timeout 330 python run.py -m experiment=speedrun train.progress=false logger=none experiment/lever=best,cublaslt_mlp,attention_triton,best hydra.sweep.dir=outputs/gpu_speedrun > $OUT/call1_speedrun.log 2>&1
echo rc $?
grep -E "reached at|startup |profile:|^\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+ |^\s+\[|Error|error|measured" $OUT/call1_speedrun.log | cut -c1-200
for i in 0 1 2 3; do cp outputs/gpu_speedrun/$i/results.json $OUT/call1_speedrun_$i.json 2>/dev/null; done
echo "== bench gates"
for lever in best cublaslt_mlp; do
timeout 100 python run.py task=bench bench.target=train_step experiment=speedrun experiment/lever=$lever logger=none hydra.run.dir=outputs/gpu_bench_$lever > $OUT/call1_bench_$lever.log 2>&1
echo $lever rc $?
grep -E "correct|measured|Error" $OUT/call1_bench_$lever.log | cut -c1-220 | tail -4
done
echo "== tuned attention configs (triton cache_results)"
for f in $(find ${TRITON_CACHE_DIR:-$HOME/.triton/cache} -name "*.autotune.json" 2>/dev/null); do echo "$f"; head -c 600 "$f"; echo; done | tee $OUT/call1_autotune.txt | head -40
