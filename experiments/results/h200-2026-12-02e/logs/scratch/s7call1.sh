set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
export PYTHONPATH=".:$PYTHONPATH"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv | tee $OUT/s7call1_env.log
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" | tee -a $OUT/s7call1_env.log
ROWS="1152,18,18,8 1152,18,18,4 768,12,12,8 768,12,12,4 1152,18,18,1"
for v in 0 1 3 2; do
  date +%T | tee -a $OUT/s7call1_bench.log
  timeout 150 python3 .gpu/bench_fold.py fold$v "{\"FOLD_LN\": $v}" $ROWS 2>&1 | tee -a $OUT/s7call1_bench.log | grep -E "ROW|Error|error" | cut -c1-400
done
date +%T | tee -a $OUT/s7call1_bench.log
