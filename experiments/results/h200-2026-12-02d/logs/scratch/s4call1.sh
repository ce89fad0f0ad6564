# next session's first call: how fast one program per SM can stream bf16 weights in Triton (tile, chunk, stages,
# tensor cores or multiply-adds), then decode=persistent at batch 1 with the tensor-core tiles (planned as for batch 2)
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
export PYTHONPATH=".:$PYTHONPATH"
timeout 240 python3 .gpu/stream_bench.py 2>&1 | tee $OUT/s4call1_stream.log | grep -c STREAM
for row in 1152,18,18,1 768,12,12,1; do
  timeout 40 python3 .gpu/bench_persist.py b1 '{}' $row 2>&1 | tee -a $OUT/s4call1_bench.log | grep ROW
  timeout 40 python3 .gpu/bench_persist.py b1_dot '{"plan_batch": 2}' $row 2>&1 | tee -a $OUT/s4call1_bench.log | grep ROW
done
# the step-by-step split of the phases at HEAD's kernel (.gpu/sub: HEAD + clock64 marks; slots in sub_bench.py)
for row in 1152,18,18,1 1152,18,18,8 384,6,6,1; do
  PYTHONPATH=".gpu/sub:.:$PYTHONPATH" timeout 60 python3 .gpu/sub_bench.py sub '{}' $row 2>&1 | tee -a $OUT/s4call1_sub.log | grep SUB
done
