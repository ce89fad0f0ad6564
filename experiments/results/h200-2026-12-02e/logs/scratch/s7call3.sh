# at the clean commit 5256688 (the README commit after it changes no code): the decode_speed study's
# gpt_2x and gpt_3x rows in one sweep (the device time left holds no more), then the GPU tests if time is left
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
date +%T
timeout 385 python3 run.py -m experiment=decode_speed model=gpt_2x,gpt_3x logger=none train.progress=false hydra.sweep.dir=outputs/gpu_decode_speed \
  2>&1 | tee $OUT/s7call3_decode_speed.log | grep -E "tok/s|Error|error" | tail -40
tar czf $OUT/s7call3.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/gpu_decode_speed
date +%T
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_persistent_decode.py tests/test_cuda_early.py 2>&1 | tee $OUT/s7call3_pytest.log | tail -2
date +%T
