# the one-part stream + pipelined stats + keys ahead (working tree) against HEAD 9c2cd97 (.gpu/old): GPU tests, then A/B
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_persistent_decode.py 2>&1 | tee $OUT/s3call3_pytest.log | tail -3
ROWS="384,6,6,1 384,6,6,8 768,12,12,4 768,12,12,8 1152,18,18,1 1152,18,18,4 1152,18,18,8"
PYTHONPATH=".:$PYTHONPATH" timeout 150 python3 .gpu/bench_persist.py new '{}' $ROWS 2>&1 | tee -a $OUT/s3call3_bench.log | grep ROW
PYTHONPATH=".gpu/old:.:$PYTHONPATH" timeout 150 python3 .gpu/bench_persist.py old '{}' $ROWS 2>&1 | tee -a $OUT/s3call3_bench.log | grep ROW
PYTHONPATH=".:$PYTHONPATH" timeout 120 python3 .gpu/bench_persist.py new_bt128 '{"BT": 128}' 384,6,6,8 768,12,12,4 768,12,12,8 1152,18,18,4 1152,18,18,8 2>&1 | tee -a $OUT/s3call3_bench.log | grep ROW
