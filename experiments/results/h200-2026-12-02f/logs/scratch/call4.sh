# the tensor-core form at batch 1 (plan(..., dot=True)) against the multiply-add form; 768 wide batch 8 tiles
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
export PYTHONPATH=$PWD:$PYTHONPATH
date +%T
B=".gpu/bench_tiles.py"
timeout 70 python3 $B base '{}' 1152,18,18,1 768,12,12,1 2>&1 | tee -a $OUT/s8call4_bench.log | grep -E "ROW|Error"
timeout 70 python3 $B dot1 '{"dot_plan": true}' 1152,18,18,1 768,12,12,1 2>&1 | tee -a $OUT/s8call4_bench.log | grep -E "ROW|Error"
timeout 45 python3 $B dot1_mlp64x128s3 '{"dot_plan": true, "BN_FC": 64, "BK_FC": 128, "BC_FC": 128, "STAGES": 3, "FOLD_FC": 2}' 1152,18,18,1 2>&1 | tee -a $OUT/s8call4_bench.log | grep -E "ROW|Error"
date +%T
timeout 45 python3 $B base '{}' 768,12,12,8 2>&1 | tee -a $OUT/s8call4_bench.log | grep -E "ROW|Error"
timeout 45 python3 $B s2 '{"STAGES": 2}' 768,12,12,8 2>&1 | tee -a $OUT/s8call4_bench.log | grep -E "ROW|Error"
date +%T
