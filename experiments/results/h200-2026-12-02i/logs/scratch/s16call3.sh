# what one program a SM streams: a weight matrix past L2 read in chunks by a pipelined dot loop (bench_stream.py)
set -o pipefail
unset PYTHONDONTWRITEBYTECODE
date +%T
timeout 240 python3 .gpu/bench_stream.py 2>&1 | tee $OUT/s16call3_stream.log | grep -E "STREAM|Error"
date +%T
