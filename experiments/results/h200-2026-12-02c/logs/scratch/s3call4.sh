# the GPU tests, a seed batch-1 A/B against 9c2cd97 (.gpu/old), then the decode_speed study at this clean commit
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_persistent_decode.py 2>&1 | tee $OUT/s3call4_pytest.log | tail -2
PYTHONPATH=".:$PYTHONPATH" timeout 25 python3 .gpu/bench_persist.py new '{}' 384,6,6,1 2>&1 | tee -a $OUT/s3call4_bench.log | grep ROW
PYTHONPATH=".gpu/old:.:$PYTHONPATH" timeout 25 python3 .gpu/bench_persist.py old '{}' 384,6,6,1 2>&1 | tee -a $OUT/s3call4_bench.log | grep ROW
timeout 420 python3 run.py -m experiment=decode_speed logger=none train.progress=false hydra.sweep.dir=outputs/gpu_decode_speed \
  2>&1 | tee $OUT/s3call4_decode_speed.log | grep -E "tok/s|Error|error" | tail -40
timeout 20 python3 -m transformerop.report outputs/gpu_decode_speed --no-wandb > $OUT/s3call4_report.txt 2>&1
tar czf $OUT/s3call4.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/gpu_decode_speed
