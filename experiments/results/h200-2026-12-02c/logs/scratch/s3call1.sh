# next session's first call: an empty grid barrier's cost (132 / 66 / 32 programs), the fp32 1152-wide
# GPU test case, and two scratch A/Bs: fewer programs at the seed's batch 1, a 256-slot cache block from batch 2
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
export PYTHONPATH=".:$PYTHONPATH"
timeout 30 python3 .gpu/barrier.py 2>&1 | tee $OUT/s3call1_barrier.log | grep BARRIER
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_persistent_decode.py -k "1152" 2>&1 | tee $OUT/s3call1_pytest.log | tail -2
for p in 132 96 66 32; do
  timeout 40 python3 .gpu/bench_persist.py p$p "{\"programs\": $p}" 384,6,6,1 2>&1 | tee -a $OUT/s3call1_bench.log | grep ROW
done
timeout 120 python3 .gpu/bench_persist.py bt128 '{}' 1152,18,18,8 768,12,12,8 2>&1 | tee -a $OUT/s3call1_bench.log | grep ROW
timeout 120 python3 .gpu/bench_persist.py bt256 '{"BT": 256}' 1152,18,18,8 768,12,12,8 2>&1 | tee -a $OUT/s3call1_bench.log | grep ROW
# the profiled generate path (phase_work_us_*, barrier_us) end to end, seed batch 1
timeout 90 python3 run.py experiment=decode_speed decode=persistent model=gpt generate.batch_size=1 \
  logger=none train.progress=false hydra.run.dir=outputs/gpu_profile 2>&1 | tee $OUT/s3call1_profile.log | grep -E "tok/s|Error|error"
python3 -c "import json; m=json.load(open('outputs/gpu_profile/results.json'))['metrics']; print({k: v for k, v in m.items() if 'phase' in k or 'barrier' in k})"
timeout 120 python3 run.py experiment=decode_speed decode=persistent model=gpt_3x generate.batch_size=8 \
  logger=none train.progress=false hydra.run.dir=outputs/gpu_profile3 2>&1 | tee $OUT/s3call1_profile3.log | grep -E "tok/s|Error|error"
python3 -c "import json; m=json.load(open('outputs/gpu_profile3/results.json'))['metrics']; print({k: v for k, v in m.items() if 'phase' in k or 'barrier' in k})"
cp outputs/gpu_profile/results.json $OUT/profile_seed_b1.json; cp outputs/gpu_profile3/results.json $OUT/profile_3x_b8.json
