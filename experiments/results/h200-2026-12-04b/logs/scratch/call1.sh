# call 1: sync costs, the megakernel's in-layer trace, the speedrun step's whole kernel list
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH PYTHONPYCACHEPREFIX=/tmp/pycache
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
A="experiment=speedrun logger=none train.progress=false"
echo "== speedrun cold (first on this machine)"; date
timeout 200 python .gpu/scratch/prof_step.py best_cold $A > $OUT/speedrun_cold.log 2>&1; echo rc $?
grep -E "startup|median|profile:|target|rror" $OUT/speedrun_cold.log | tail -8
echo "== sync bench"; timeout 150 python .gpu/scratch/sync_bench.py 2>&1 | tail -12
echo "== megakernel trace"; timeout 300 python .gpu/scratch/mk_trace.py > $OUT/mk_trace.log 2>&1; echo rc $?; tail -50 $OUT/mk_trace.log
echo "== speedrun warm, attention=triton"
timeout 120 python .gpu/scratch/prof_step.py triton $A attention=triton > $OUT/speedrun_triton.log 2>&1; echo rc $?
grep -E "startup|median|profile:|target|rror" $OUT/speedrun_triton.log | tail -6
date
