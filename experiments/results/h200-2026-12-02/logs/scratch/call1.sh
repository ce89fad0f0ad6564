# call 1: the persistent path's GPU tests, then its 9 decode_speed rows with and without the L2 prefetch
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_persistent_decode.py 2>&1 | tee $OUT/call1_pytest.log | tail -5
timeout 540 python3 run.py -m experiment=decode_speed decode=persistent decode.l2_prefetch=true,false logger=none \
  train.progress=false hydra.sweep.dir=outputs/gpu_call1 2>&1 | tee $OUT/call1_sweep.log | grep -E "== generate|tok/s|Error|error|parity" | tail -80
timeout 60 python3 -m transformerop.report outputs/gpu_call1 --no-wandb > $OUT/call1_report.txt 2>&1
cp outputs/gpu_call1/report.md $OUT/call1_report.md 2>/dev/null
tar czf $OUT/call1.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/gpu_call1
ls -la $OUT
