# by-hand tiles at the rows nearest and furthest from 1.5x decode=compiled (768 and 1152 wide, batch 8)
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
date +%T
common="experiment=decode_speed decode=persistent logger=none train.progress=false"
run() { name=$1; t=$2; shift 2; timeout $t python3 run.py -m $common hydra.sweep.dir=outputs/s15/$name "$@" > $OUT/s15call3_$name.log 2>&1; echo "$name rc=$?"; python3 .gpu/rows.py outputs/s15/$name; date +%T; }
run b8_2x 200 model=gpt_2x generate.batch_size=8 '++decode.tiles={},{SHARED_O:false},{STAGES:3},{BK_QKV:128},{num_warps:4},{BT:128},{O_CHUNKS:6}'
run b8_3x 120 model=gpt_3x generate.batch_size=8 '++decode.tiles={SHARED_O:false},{num_warps:4},{BT:128}'
date +%T
