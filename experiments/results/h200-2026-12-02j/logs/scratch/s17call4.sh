# GELU and the fused norm's backward reduction against replacements; Triton's own start on a cold and a filled cache
set -o pipefail
export PYTHONPATH=$PWD:$PYTHONPATH
date +%T
timeout 300 python3 .gpu/bench_elem.py 2>&1 | tee $OUT/s17call4_elem.log | cut -c1-200
date +%T
for i in 1 2 3; do
  c=$(mktemp -d)
  TRITON_CACHE_DIR=$c timeout 60 python3 .gpu/bench_tstart.py 2>&1 | grep -E "TSTART|Error" | sed 's/^/cold: /' | tee -a $OUT/s17call4_tstart.log
  TRITON_CACHE_DIR=$c timeout 60 python3 .gpu/bench_tstart.py 2>&1 | grep -E "TSTART|Error" | sed 's/^/filled: /' | tee -a $OUT/s17call4_tstart.log
done
date +%T
