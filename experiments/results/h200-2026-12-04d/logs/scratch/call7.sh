# call 7: the attention_kernels rows through task=bench: attention.forward=gluon, then sdpa and tl (one process each, profiler off)
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
C="experiment=attention_kernels logger=none train.progress=false bench.profile=false sweep.isolate=false"
echo "== gluon rows"; timeout 150 python run.py -m $C hydra.sweeper.params.attention=triton attention.forward=gluon hydra.sweep.dir=/tmp/sw_gluon > /tmp/g.log 2>&1; echo rc $?; tail -3 /tmp/g.log
python .gpu/scratch/collect.py /tmp/sw_gluon $OUT/rows_gluon.json
echo "== sdpa and tl rows"; timeout 170 python run.py -m $C hydra.sweep.dir=/tmp/sw_base > /tmp/b.log 2>&1; echo rc $?; tail -3 /tmp/b.log
python .gpu/scratch/collect.py /tmp/sw_base $OUT/rows_base.json
