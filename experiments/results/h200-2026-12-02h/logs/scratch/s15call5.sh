# the decode_speed study's rows at 768 and 1152 wide, batch 4 and 8 (decode=compiled and decode=persistent) at the plan's qkv chunks of 128
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
date +%T
timeout 265 python3 run.py -m experiment=decode_speed model=gpt_2x,gpt_3x generate.batch_size=4,8 logger=none train.progress=false hydra.sweep.dir=outputs/s15/decode_speed > $OUT/s15call5_decode_speed.log 2>&1; echo "study rc=$?"
python3 .gpu/rows.py outputs/s15/decode_speed
tar czf $OUT/s15call5_decode_speed.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/s15/decode_speed
date +%T
