# the fused MLP's GELU matmuls: tiles and TMA variants against cuBLAS + GELU
set -o pipefail
export PYTHONPATH=$PWD:$PYTHONPATH
date +%T
timeout 420 python3 .gpu/bench_mlp.py 384,768,1152 2>&1 | tee $OUT/s17call1_mlp.log | grep -v "^$" | tail -n 400 | cut -c1-160
date +%T
