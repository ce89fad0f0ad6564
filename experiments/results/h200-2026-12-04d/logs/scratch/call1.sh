# call 1: gluon attention forward lab; dense embedding grad A/B in the train step
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
echo "== attn_lab"; timeout 300 python .gpu/scratch/attn_lab.py 2>&1 | grep -v Warning | tail -40
B="task=bench bench.target=train_step data=shakespeare model=gpt model.bias=false train.dtype=bfloat16 train.cuda_graph=true model.fused_norm=true logger=none train.progress=false"
for d in false true; do
  echo "== train_step dense_embedding_grad=$d"
  timeout 120 python run.py $B model.dense_embedding_grad=$d hydra.run.dir=/tmp/b_$d > /tmp/b.log 2>&1
  echo rc $?; cp /tmp/b_$d/results.json $OUT/bench_deg_$d.json; grep -E "correct|measured|Error" /tmp/b.log | tail -3
done
