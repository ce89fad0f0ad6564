# call 6: GPU tests of the Gluon forward; sdpa / tl / gluon through attend(), eager and graphed; dense embedding grad again
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
echo "== pytest gpu"; timeout 150 python -m pytest -q -m gpu tests/test_gluon_attention.py 2>&1 | tail -4
echo "== attn_lab2"; timeout 240 python .gpu/scratch/attn_lab2.py 2>&1 | grep -v Warning | tail -12
B="task=bench bench.target=train_step data=shakespeare model=gpt model.bias=false train.dtype=bfloat16 train.cuda_graph=true model.fused_norm=true logger=none train.progress=false"
for d in true false; do
  echo "== train_step dense_embedding_grad=$d"
  timeout 100 python run.py $B model.dense_embedding_grad=$d hydra.run.dir=/tmp/b_$d > /tmp/b.log 2>&1
  echo rc $?; cp /tmp/b_$d/results.json $OUT/bench_deg_$d.json; grep -E "correct|measured|Error" /tmp/b.log | tail -2
done
