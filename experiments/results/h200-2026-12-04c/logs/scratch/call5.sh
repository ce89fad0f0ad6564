# call 5: the fused MLP's tiles through the GPU tests and the train step; a speedrun on this machine; decode GPU tests
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH PYTHONPYCACHEPREFIX=/tmp/pycache
echo "== speedrun (this machine's first run.py)"; timeout 90 python run.py experiment=speedrun logger=none train.progress=false hydra.run.dir=/tmp/sr > $OUT/speedrun.log 2>&1; echo rc $?
cp /tmp/sr/results.json $OUT/speedrun_results.json; grep -E "startup|target|val|step" $OUT/speedrun.log | grep -v Warn | tail -6
echo "== gpu test fused mlp"; timeout 150 python -m pytest -q -m gpu tests/test_triton_mlp.py tests/test_kernel_warmups.py 2>&1 | tail -3
B="task=bench bench.target=train_step data=shakespeare model=gpt model.bias=false train.dtype=bfloat16 train.cuda_graph=true model.fused_norm=true logger=none train.progress=false"
i=0; for f in true false; do i=$((i+1))
  echo "== train_step fused_mlp=$f"; timeout 120 python run.py $B model.fused_mlp=$f hydra.run.dir=/tmp/bench_$i > $OUT/bench.log 2>&1; echo rc $?
  cp /tmp/bench_$i/results.json $OUT/bench_${i}_fused_mlp_$f.json
  grep -E "correct|measured" $OUT/bench.log | tail -2
done
echo "== gpu tests persistent decode"; timeout 170 python -m pytest -q -m gpu tests/test_persistent_decode.py 2>&1 | tail -3
