# 16 warps a program at batch 1 (the plan's register budget doubles with the warps: wider tiles) against 8, at a6a8071
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
export PYTHONPATH=".:$PYTHONPATH"
ROWS="1152,18,18,1 768,12,12,1 384,6,6,1"
timeout 60 python3 .gpu/bench_persist.py w8 '{}' $ROWS 2>&1 | tee -a $OUT/s5call6_bench.log | grep ROW
timeout 80 python3 .gpu/bench_persist.py w16 '{"warps": 16}' $ROWS 2>&1 | tee -a $OUT/s5call6_bench.log | grep -E "ROW|Error"
