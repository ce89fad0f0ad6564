# call 4: the rows the default tile ranking changed, against decode=compiled, at this commit
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
timeout 200 python3 run.py -m experiment=decode_speed model=gpt_3x generate.batch_size=4,8 logger=none train.progress=false \
  hydra.sweep.dir=outputs/gpu_decode_speed_gpt3x 2>&1 | tee $OUT/call4_gpt3x.log | grep -E "tok/s|Error|error"
tar czf $OUT/call4.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/gpu_decode_speed_gpt3x
