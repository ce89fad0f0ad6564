# PREFETCH 2 (each program prefetches the rows it will read) against none; ADD_ONCE without the prefetch;
# first-call costs at start-up
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
export PYTHONPATH=$PWD:$PYTHONPATH
date +%T
for pf in 0 2; do
  timeout 120 python3 .gpu/bench_prefetch.py pf$pf "{\"PREFETCH\": $pf}" 1152,18,18,8 1152,18,18,1 768,12,12,8 2>&1 | tee -a $OUT/s8call2_bench.log | grep -E "ROW|Error"
done
date +%T
timeout 80 python3 .gpu/bench_prefetch.py add_once '{"ADD_ONCE": true, "PREFETCH": 0}' 1152,18,18,1 768,12,12,1 2>&1 | tee -a $OUT/s8call2_bench.log | grep -E "ROW|Error"
timeout 40 python3 .gpu/bench_prefetch.py pf0 '{"PREFETCH": 0}' 768,12,12,1 2>&1 | tee -a $OUT/s8call2_bench.log | grep -E "ROW|Error"
date +%T
for m in order thread order thread; do timeout 60 python3 .gpu/firsts.py $m 2>&1 | tee -a $OUT/s8call2_firsts.log | grep -v Warn; done
date +%T
