set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
export PYTHONPATH=".:$PYTHONPATH"
export TRITON_CACHE_DIR=/tmp/triton_cache
b() { date +%T | tee -a $OUT/s7call2_bench.log; timeout $1 python3 .gpu/bench_fold.py $2 "$3" ${@:4} 2>&1 | tee -a $OUT/s7call2_bench.log | grep -E "ROW|Error|error" | cut -c1-420; }
b 150 base '{"FOLD_QKV": 0, "FOLD_FC": 0, "FOLD_V": 0}' 1152,18,18,8 1152,18,18,4 1152,18,18,1 768,12,12,4
b 150 plan '{}' 1152,18,18,8 1152,18,18,4 1152,18,18,1 768,12,12,4
b 50 copy '{"FOLD_QKV": 1, "FOLD_FC": 1, "FOLD_V": 1}' 1152,18,18,8
b 50 slot '{"FOLD_QKV": 3, "FOLD_FC": 3, "FOLD_V": 1}' 1152,18,18,1
date +%T | tee -a $OUT/s7call2_bench.log
date +%T | tee $OUT/s7call2_startup.log
timeout 110 bash .gpu/startup_ab.sh 2>&1 | tee -a $OUT/s7call2_startup.log
timeout 40 python3 -m pytest -q -m gpu tests/test_cuda_early.py 2>&1 | tail -3 | tee -a $OUT/s7call2_startup.log
