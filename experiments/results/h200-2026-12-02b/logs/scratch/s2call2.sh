# session 2 call 2: GPU tests at this tree, then the weight loops' pipelining depth (decode.stages) A/B,
# attn_proj=auto (the plan's choice), in one process per depth
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
git log -1 --format='%h %s' 2>/dev/null | cut -c1-80; git status --short | head
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_persistent_decode.py 2>&1 | tee $OUT/s2call2_pytest.log | tail -3
export PYTHONPATH=".:$PYTHONPATH"
ROWS="768,12,12,8 1152,18,18,1 1152,18,18,4 1152,18,18,8 384,6,6,8"
for s in 1 2 3; do
  timeout 150 python3 .gpu/bench_persist.py s$s "{\"stages\": $s}" $ROWS 2>&1 | tee -a $OUT/s2call2_bench.log | grep ROW
done
timeout 100 python3 .gpu/bench_persist.py bt256 '{"BT": 256}' 384,6,6,1 1152,18,18,1 2>&1 | tee -a $OUT/s2call2_bench.log | grep ROW
timeout 60 python3 .gpu/bench_persist.py bt128 '{}' 384,6,6,1 2>&1 | tee -a $OUT/s2call2_bench.log | grep ROW
