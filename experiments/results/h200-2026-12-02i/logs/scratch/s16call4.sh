# a cold Triton cache: the fused norm's seven specializations compiled one after another, then from seven threads
set -o pipefail
unset PYTHONDONTWRITEBYTECODE
export PYTHONPATH=$PWD:$PYTHONPATH
date +%T
for mode in seq par seq par; do
  TRITON_CACHE_DIR=$(mktemp -d) timeout 90 python3 .gpu/bench_compile.py $mode 2>&1 | tee -a $OUT/s16call4_compile.log | grep -E "COMPILE|Error"
done
date +%T
