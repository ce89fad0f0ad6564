set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
export PYTHONPATH=".:$PYTHONPATH"
timeout 150 python3 -m pytest -q -m gpu tests/test_persistent_decode.py -x 2>&1 | tail -30 | tee $OUT/s5call3_pytest.log | tail -3
timeout 90 python3 .gpu/diag_parity.py 2>&1 | tee $OUT/s5call3_diag.log | grep -E "DIAG|Error"
ROWS="1152,18,18,1 768,12,12,1 384,6,6,1 1152,18,18,8 768,12,12,8"
PYTHONPATH=".gpu/head:.:$PYTHONPATH" timeout 100 python3 .gpu/bench_persist.py head '{}' $ROWS 2>&1 | tee -a $OUT/s5call3_bench.log | grep ROW
timeout 100 python3 .gpu/bench_persist.py new '{}' $ROWS 2>&1 | tee -a $OUT/s5call3_bench.log | grep ROW
timeout 100 python3 .gpu/bench_persist.py new_nospan '{"no_span": true}' $ROWS 2>&1 | tee -a $OUT/s5call3_bench.log | grep ROW
