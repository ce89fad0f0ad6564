# GPU tests of the persistent path (L2_NEXT's parity case, its first run); L2_NEXT A/B at 768 and 1152 wide, batch 1, 4, 8
set -o pipefail
unset PYTHONDONTWRITEBYTECODE
date +%T
timeout 200 python3 -m pytest -q -m gpu tests/test_persistent_decode.py 2>&1 | tail -15 | tee $OUT/s16call1_pytest.log
date +%T
common="experiment=decode_speed decode=persistent logger=none train.progress=false"
run() { name=$1; t=$2; shift 2; timeout $t python3 run.py -m $common hydra.sweep.dir=outputs/s16/$name "$@" > $OUT/s16call1_$name.log 2>&1; echo "$name rc=$?"; python3 .gpu/rows.py outputs/s16/$name; date +%T; }
run l2_b48 330 model=gpt_2x,gpt_3x generate.batch_size=8,4 '++decode.tiles={},{L2_NEXT:true}'
run l2_b1 150 model=gpt_2x,gpt_3x generate.batch_size=1 '++decode.tiles={},{L2_NEXT:true}'
tar czf $OUT/s16call1_sweeps.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/s16
date +%T
