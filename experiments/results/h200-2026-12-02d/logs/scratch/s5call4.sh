# at the clean commit: the GPU tests, then the decode_speed study's seed and gpt_2x rows (gpt_3x in the next call)
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_persistent_decode.py 2>&1 | tee $OUT/s5call4_pytest.log | tail -2
timeout 400 python3 run.py -m experiment=decode_speed model=gpt,gpt_2x logger=none train.progress=false hydra.sweep.dir=outputs/gpu_decode_speed \
  2>&1 | tee $OUT/s5call4_decode_speed.log | grep -E "tok/s|Error|error" | tail -40
timeout 20 python3 -m transformerop.report outputs/gpu_decode_speed --no-wandb > $OUT/s5call4_report.txt 2>&1
tar czf $OUT/s5call4.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/gpu_decode_speed
