# GPU tests of the code since the last measured commit (plan narrowing, ADD_ONCE, cuda_early fixes,
# the _tile_output refactor, the L2 prefetch); A/B of PREFETCH and ADD_ONCE; start-up diagnostics
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
export PYTHONPATH=$PWD:$PYTHONPATH
date +%T; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c "import torch; p=torch.cuda.get_device_properties(0); print('L2', p.L2_cache_size, 'SMs', p.multi_processor_count)"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_persistent_decode.py tests/test_cuda_early.py 2>&1 | tee $OUT/s8call1_pytest.log | tail -3
date +%T
for pf in false true; do
  timeout 140 python3 .gpu/bench_prefetch.py pf_$pf "{\"PREFETCH\": $pf}" 1152,18,18,8 1152,18,18,4 1152,18,18,1 768,12,12,8 2>&1 | tee -a $OUT/s8call1_bench.log | grep -E "ROW|Error" 
done
date +%T
timeout 60 python3 .gpu/bench_prefetch.py add_once '{"ADD_ONCE": true}' 1152,18,18,1 768,12,12,1 2>&1 | tee -a $OUT/s8call1_bench.log | grep -E "ROW|Error"
timeout 40 python3 .gpu/bench_prefetch.py base '{}' 768,12,12,1 2>&1 | tee -a $OUT/s8call1_bench.log | grep -E "ROW|Error"
date +%T
# start-up: where the imports and the capture phase go on this machine (one warm-up run first)
timeout 60 python3 run.py experiment=speedrun train.progress=false train.profile=false logger=none train.max_iters=30 2>&1 | grep -E "startup" | tee -a $OUT/s8call1_startup.log
timeout 60 python3 -X importtime run.py experiment=speedrun train.progress=false train.profile=false logger=none train.max_iters=30 2> $OUT/s8call1_importtime.log | grep startup | tee -a $OUT/s8call1_startup.log
timeout 90 python3 -m cProfile -o $OUT/s8call1_startup.prof run.py experiment=speedrun train.progress=false train.profile=false logger=none train.max_iters=30 2>&1 | grep startup | tee -a $OUT/s8call1_startup.log
date +%T
