# call 2: sync costs with replicated accumulation slots; the megakernel's in-layer trace
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH PYTHONPYCACHEPREFIX=/tmp/pycache
echo "== sync bench"; timeout 150 python .gpu/scratch/sync_bench.py 2>&1 | tail -40
echo "== megakernel trace"; timeout 400 python .gpu/scratch/mk_trace.py > $OUT/mk_trace.log 2>&1; echo rc $?; grep -v Warning $OUT/mk_trace.log | tail -50
