# call 7: a second pair of train-step runs, the norm's column sums against the commit before them
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
B="task=bench bench.target=train_step data=shakespeare model=gpt model.bias=false train.dtype=bfloat16 train.cuda_graph=true model.fused_norm=true logger=none train.progress=false"
cp -r data .gpu/base/ 2>/dev/null
for side in base new; do
  echo "== train_step $side"
  if [ $side = base ]; then (cd .gpu/base && PYTHONPATH=/tmp/site timeout 100 python run.py $B hydra.run.dir=/tmp/b_$side > /tmp/b.log 2>&1); else timeout 100 python run.py $B hydra.run.dir=/tmp/b_$side > /tmp/b.log 2>&1; fi
  echo rc $?; cp /tmp/b_$side/results.json $OUT/bench_$side.json; grep -E "correct|measured" /tmp/b.log | tail -2
done
