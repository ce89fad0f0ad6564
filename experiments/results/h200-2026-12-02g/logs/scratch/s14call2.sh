# the decode_speed study at this commit (the plan: spans for the multiply-add qkv phase, the MLP on the
# tensor cores at 1152 wide batch 1); then gpt_2x batch 1 with its old qkv tiles, against the plan's
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
date +%T
timeout 500 python3 run.py -m experiment=decode_speed logger=none train.progress=false hydra.sweep.dir=outputs/gpu_decode_speed > $OUT/s14call2_study.log 2>&1; echo "study rc=$?"
python3 .gpu/rows.py outputs/gpu_decode_speed
date +%T
timeout 45 python3 run.py -m experiment=decode_speed decode=persistent model=gpt_2x generate.batch_size=1 logger=none train.progress=false hydra.sweep.dir=outputs/s14/b1_2x_old '++decode.tiles={BN_QKV:16,BK_QKV:1024,SPAN_QKV:16}' > $OUT/s14call2_b1_2x_old.log 2>&1; echo "old rc=$?"
python3 .gpu/rows.py outputs/s14/b1_2x_old
tar czf $OUT/s14call2_sweeps.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/gpu_decode_speed outputs/s14
date +%T
