# at the clean commit: the decode_speed study's gpt_3x rows (compiled and persistent, batch 1, 4, 8)
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
timeout 330 python3 run.py -m experiment=decode_speed model=gpt_3x logger=none train.progress=false hydra.sweep.dir=outputs/gpu_decode_speed_3x \
  2>&1 | tee $OUT/s5call5_decode_speed_3x.log | grep -E "tok/s|Error|error" | tail -40
timeout 20 python3 -m transformerop.report outputs/gpu_decode_speed_3x --no-wandb > $OUT/s5call5_report.txt 2>&1
tar czf $OUT/s5call5.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/gpu_decode_speed_3x
