# call 2: the warm-ups test's failure in full; the levers together (speedrun, single fresh processes);
# the train-step bench with them (gradient gate); the cuBLASLt GELU epilogue prototype
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
echo "== warmups test"
timeout 150 python -m pytest -q --no-header -x -m gpu -p no:cacheprovider tests/test_kernel_warmups.py 2>&1 | tail -30
echo "== gelu proto"
(cd .gpu/scratch && timeout 200 python check_gpu.py 2>&1 | grep -v Warn | tail -30)
S="experiment=speedrun train.progress=false logger=none"
A="train.master_weights=true train.fused_step=true model.stream_dtype=bfloat16 model.fused_head=true"
run() { name=$1; shift; echo "== $name"; timeout 100 python run.py $S "$@" hydra.run.dir=outputs/c2_$name > $OUT/$name.log 2>&1; echo rc $?;
  grep -E "reached at|startup|median|Error|error" $OUT/$name.log | tail -4; }
run base
run A1 $A
run B1 $A attention=triton
run A2 $A
run B2 $A attention=triton
echo "== bench A"
timeout 120 python run.py task=bench bench.target=train_step data=shakespeare model=gpt model.bias=false train.dtype=bfloat16 \
  train.cuda_graph=true model.fused_norm=true model.dense_embedding_grad=true $A logger=none train.progress=false hydra.run.dir=outputs/c2_bench > $OUT/bench.log 2>&1
echo rc $?; grep -E "correct|measured|predict|Error" $OUT/bench.log | tail -6
tar czf $OUT/c2.tgz --exclude='*.pt' --exclude=trace.json --exclude=media outputs/c2_*
echo "== attention op tests"
timeout 150 python -m pytest -q --no-header -m gpu -p no:cacheprovider tests/test_triton_attention_op.py tests/test_triton_attention.py -k "op or packed or atomic and B64" 2>&1 | tail -15
