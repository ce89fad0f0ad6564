# call 3: the persistent GPU tests, the decode_speed study at this commit, and the bytes tile ranking where it differs
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
git log -1 --format='%h %s' 2>/dev/null | cut -c1-80
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_persistent_decode.py 2>&1 | tee $OUT/call3_pytest.log | tail -3
timeout 420 python3 run.py -m experiment=decode_speed logger=none train.progress=false hydra.sweep.dir=outputs/gpu_decode_speed \
  2>&1 | tee $OUT/call3_decode_speed.log | grep -E "tok/s|Error|error" | tail -40
timeout 100 python3 run.py -m experiment=decode_speed decode=persistent model=gpt_3x generate.batch_size=4,8 decode.tile_cost=bytes \
  logger=none train.progress=false hydra.sweep.dir=outputs/gpu_decode_speed_bytes 2>&1 | tee $OUT/call3_bytes.log | grep -E "tok/s|Error|error"
timeout 60 python3 -m transformerop.report outputs/gpu_decode_speed --no-wandb > $OUT/call3_report.txt 2>&1
tar czf $OUT/call3.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/gpu_decode_speed outputs/gpu_decode_speed_bytes
