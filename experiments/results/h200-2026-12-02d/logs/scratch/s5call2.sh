# the chunks-ahead change: GPU parity, then A/B against HEAD (c4be600, .gpu/head) at 5 rows
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
export PYTHONPATH=".:$PYTHONPATH"
timeout 170 python3 -m pytest -q -m gpu tests/test_persistent_decode.py 2>&1 | tail -4 | tee $OUT/s5call2_pytest.log
ROWS="1152,18,18,1 768,12,12,1 384,6,6,1 768,12,12,4 768,12,12,8"
PYTHONPATH=".gpu/head:.:$PYTHONPATH" timeout 120 python3 .gpu/bench_persist.py head '{}' $ROWS 2>&1 | tee -a $OUT/s5call2_bench.log | grep ROW
timeout 120 python3 .gpu/bench_persist.py new '{}' $ROWS 2>&1 | tee -a $OUT/s5call2_bench.log | grep ROW
timeout 100 python3 .gpu/bench_persist.py new_noahead '{"tiles": {"AHEAD": false}}' $ROWS 2>&1 | tee -a $OUT/s5call2_bench.log | grep ROW
timeout 40 python3 .gpu/bench_persist.py wide_fc '{"tiles": {"SPAN_FC": 35, "BN_FC": 64, "BK_FC": 128, "BC_FC": 128}}' 1152,18,18,1 2>&1 | tee -a $OUT/s5call2_bench.log | grep ROW
