# call 3: the fused MLP's kernel with TMA, persistent, rational erf: tiles, the MLP, the train step; REPS default
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH PYTHONPYCACHEPREFIX=/tmp/pycache
echo "== mlp tiles C=384"; C=384 timeout 200 python .gpu/scratch/mlp_tiles.py > /tmp/mlp_tiles_384.log 2>&1; echo rc $?
grep -E "^(fwd|bwd|mlp|\{)" /tmp/mlp_tiles_384.log; grep -iE "error|Trace" /tmp/mlp_tiles_384.log | head -5
echo "== gpu test fused mlp"; timeout 200 python -m pytest -q -m gpu tests/test_triton_mlp.py tests/test_kernel_warmups.py 2>&1 | tail -3
B="task=bench bench.target=train_step data=shakespeare model=gpt model.bias=false train.dtype=bfloat16 train.cuda_graph=true model.fused_norm=true logger=none train.progress=false"
i=0; for f in false true false true; do i=$((i+1))
  echo "== train_step fused_mlp=$f"; timeout 150 python run.py $B model.fused_mlp=$f hydra.run.dir=/tmp/bench_$i > $OUT/bench.log 2>&1; echo rc $?
  cp /tmp/bench_$i/results.json $OUT/bench_${i}_fused_mlp_$f.json
  grep -E "train_step|grad|gate|ms" $OUT/bench.log | grep -v Warn | tail -4
done
echo "== decode seed b1, default plan"
timeout 120 python run.py experiment=decode_speed logger=none train.progress=false decode=persistent model=gpt generate.batch_size=1 > $OUT/run.log 2>&1; echo rc $?
grep -E "tok/s|parity|rror|phase" $OUT/run.log | tail -4
echo "== mlp tiles C=768"; C=768 M=8192 timeout 150 python .gpu/scratch/mlp_tiles.py > /tmp/mlp_tiles_768.log 2>&1; echo rc $?
grep -E "^(fwd|bwd|mlp|\{)" /tmp/mlp_tiles_768.log
