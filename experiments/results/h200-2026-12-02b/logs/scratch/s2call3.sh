# session 2 call 3: the decode_speed study at this clean commit, then the persistent GPU tests
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
git log -1 --format='%h %s' 2>/dev/null | cut -c1-80; git status --short | head -3
timeout 420 python3 run.py -m experiment=decode_speed logger=none train.progress=false hydra.sweep.dir=outputs/gpu_decode_speed \
  2>&1 | tee $OUT/s2call3_decode_speed.log | grep -E "tok/s|Error|error" | tail -40
timeout 30 python3 -m transformerop.report outputs/gpu_decode_speed --no-wandb > $OUT/s2call3_report.txt 2>&1
tar czf $OUT/s2call3.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/gpu_decode_speed
timeout 80 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_persistent_decode.py 2>&1 | tee $OUT/s2call3_pytest.log | tail -3
