# the tensor-core qkv (and MLP) loops in chunks of 128: more, smaller chunks through the same pipeline, at 768 and
# 1152 wide, batch 4 and 8; decode=compiled at 768 wide batch 8 in the same call
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
date +%T
common="experiment=decode_speed logger=none train.progress=false"
run() { name=$1; t=$2; shift 2; timeout $t python3 run.py -m $common hydra.sweep.dir=outputs/s15/$name "$@" > $OUT/s15call4_$name.log 2>&1; echo "$name rc=$?"; python3 .gpu/rows.py outputs/s15/$name; date +%T; }
run bk128 340 decode=persistent model=gpt_2x,gpt_3x generate.batch_size=8,4 '++decode.tiles={},{BK_QKV:128},{BK_QKV:128,BK_FC:128}'
run compiled_2x_b8 70 decode=compiled model=gpt_2x generate.batch_size=8
date +%T
