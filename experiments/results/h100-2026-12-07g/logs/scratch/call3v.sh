# call 3v (clean tree 410bbc5 on branch work-tn; little device time left): triton_tn's GPU test, its kernel bench, train step B (triton_tn) then A (fe48fac's split_k/gpt)
source .gpu/env.sh; export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%T
timeout 45 python -m pytest -v -p no:cacheprovider -m gpu tests/test_triton_tn.py > $OUT/c3_tests.log 2>&1; echo "rc $?"; grep -E "PASSED|FAILED|Error|assert" $OUT/c3_tests.log | cut -c1-160 | head -6
timeout 25 python .gpu/scratch/tn_bench.py > $OUT/c3_tn_bench.log 2>&1; echo "rc $?"; tail -6 $OUT/c3_tn_bench.log
bench() {
  timeout 40 python run.py task=bench bench.target=train_step experiment=speedrun logger=none \
    hydra.run.dir=outputs/c3_bench_$1 > $OUT/c3_bench_$1.log 2>&1
  echo "$1 rc $?"; grep -E "correct:|measured" $OUT/c3_bench_$1.log | cut -c1-200 | head -2; }
bench B1; cp .gpu/scratch/oldtn/split_k.py .gpu/scratch/oldtn/gpt.py transformerop/model/; bench A1
date -u +%T
