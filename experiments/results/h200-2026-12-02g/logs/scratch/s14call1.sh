# GPU tests of the code not yet run on a GPU; tile spans (SPAN_QKV, SPAN_FC) and DOT_FC A/Bs through the decode_speed study
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
date +%T
timeout 150 python3 -m pytest -q -m gpu tests/test_persistent_decode.py tests/test_cuda_early.py 2>&1 | tail -8 | tee $OUT/s14call1_pytest.log
date +%T
common="experiment=decode_speed decode=persistent logger=none train.progress=false"
run() { name=$1; t=$2; shift 2; timeout $t python3 run.py -m $common hydra.sweep.dir=outputs/s14/$name "$@" > $OUT/s14call1_$name.log 2>&1; echo "$name rc=$?"; python3 .gpu/rows.py outputs/s14/$name; date +%T; }
run b48_3x 120 model=gpt_3x generate.batch_size=4,8 '++decode.tiles={},{SPAN_QKV:32,SPAN_FC:64},{SPAN_QKV:32}'
run b1_3x 90 model=gpt_3x generate.batch_size=1 '++decode.tiles={},{DOT_FC:true,BN_FC:64,BK_FC:128,STAGES:3},{DOT_FC:true,BN_FC:64,BK_FC:128,STAGES:3,SPAN_FC:64},{DOT_FC:true,BN_FC:64,BK_FC:128,STAGES:3,SPAN_QKV:28}'
run b48_2x 100 model=gpt_2x generate.batch_size=4,8 '++decode.tiles={},{SPAN_QKV:32,SPAN_FC:32},{SPAN_QKV:32}'
run b1_2x 60 model=gpt_2x generate.batch_size=1 '++decode.tiles={},{DOT_FC:true},{DOT_FC:true,BN_FC:64,BK_FC:128,STAGES:3}'
run b148_1x 90 model=gpt generate.batch_size=1,4,8 '++decode.tiles={},{SPAN_QKV:16,SPAN_FC:16},{DOT_FC:true}'
tar czf $OUT/s14call1_sweeps.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/s14
date +%T
