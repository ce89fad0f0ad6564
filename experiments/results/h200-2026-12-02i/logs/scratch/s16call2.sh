# by-hand tiles where decode=persistent misses 1.5x: bigger MLP chunks, deeper pipeline, spans that use every program
set -o pipefail
unset PYTHONDONTWRITEBYTECODE
date +%T
common="experiment=decode_speed decode=persistent logger=none train.progress=false"
run() { name=$1; t=$2; shift 2; timeout $t python3 run.py -m $common hydra.sweep.dir=outputs/s16/$name "$@" > $OUT/s16call2_$name.log 2>&1; echo "$name rc=$?"; python3 .gpu/rows.py outputs/s16/$name; date +%T; }
run t3x_b8 220 model=gpt_3x generate.batch_size=8 '++decode.tiles={},{BN_FC:64,BK_FC:256},{BN_FC:64,BK_FC:256,SPAN_FC:35},{STAGES:4},{SPAN_QKV:27},{BK_QKV:256,SPAN_QKV:27},{STAGES:4,SPAN_FC:35}'
run t3x_b4 110 model=gpt_3x generate.batch_size=4 '++decode.tiles={},{BN_FC:64,BK_FC:256},{STAGES:4},{BN_FC:64,BK_FC:256,SPAN_FC:35}'
run t3x_b1 120 model=gpt_3x generate.batch_size=1 '++decode.tiles={},{BN_FC:64,BK_FC:256},{BN_FC:64,BK_FC:256,SPAN_FC:35},{STAGES:4}'
run t2x_b8 110 model=gpt_2x generate.batch_size=8 '++decode.tiles={},{SPAN_FC:24},{STAGES:3,SPAN_FC:24},{BN_FC:32,BK_FC:512,SPAN_FC:24,STAGES:2}'
tar czf $OUT/s16call2_sweeps.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/s16/t*
date +%T
