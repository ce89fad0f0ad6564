# sub-phase clock64 split of decode=persistent (scratch tree .gpu/sub), then BT 256 at batch 4
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
for row in 384,6,6,1 1152,18,18,8 1152,18,18,1 768,12,12,8 384,6,6,8; do
  PYTHONPATH=".gpu/sub:.:$PYTHONPATH" timeout 100 python3 .gpu/sub_bench.py sub '{}' $row 2>&1 | tee -a $OUT/s3call2_sub.log | grep SUB
done
PYTHONPATH=".:$PYTHONPATH" timeout 100 python3 .gpu/bench_persist.py bt256 '{"BT": 256}' 1152,18,18,4 768,12,12,4 384,6,6,8 2>&1 | tee -a $OUT/s3call2_bench.log | grep ROW
PYTHONPATH=".:$PYTHONPATH" timeout 100 python3 .gpu/bench_persist.py bt128 '{}' 1152,18,18,4 768,12,12,4 384,6,6,8 2>&1 | tee -a $OUT/s3call2_bench.log | grep ROW
