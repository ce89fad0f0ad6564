# session 2 call 1: the persistent GPU tests, then attn_proj=row against head at every row of decode_speed
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
git log -1 --format='%h %s' 2>/dev/null | cut -c1-80
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_persistent_decode.py 2>&1 | tee $OUT/s2call1_pytest.log | tail -5
timeout 420 python3 run.py -m experiment=decode_speed decode=persistent decode.attn_proj=row,head logger=none train.progress=false \
  hydra.sweep.dir=outputs/gpu_attn_proj 2>&1 | tee $OUT/s2call1_attn_proj.log | grep -E "tok/s|Error|error" | tail -40
tar czf $OUT/s2call1.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/gpu_attn_proj
