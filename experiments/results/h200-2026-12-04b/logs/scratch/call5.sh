# call 5 (79a83be): the megakernel trace with the SM clock over the traced layer; the sm clocks the GPU reports
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.applications.graphics --format=csv
echo "== megakernel trace"; timeout 200 python .gpu/scratch/mk_trace.py > $OUT/mk_trace.log 2>&1; echo rc $?; grep -v Warning $OUT/mk_trace.log | tail -16
