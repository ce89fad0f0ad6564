# call 3 (from 5947fd7): the megakernel with its schedule and biases in shared memory and the slots in copies
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH PYTHONPYCACHEPREFIX=/tmp/pycache
echo "== gpu tests"; timeout 420 python -m pytest -q -m gpu tests/test_megakernel.py 2>&1 | tail -4
R="experiment=decode_speed logger=none train.progress=false"
for args in "decode=megakernel model=gpt generate.batch_size=1" "decode=persistent model=gpt generate.batch_size=1" \
            "decode=megakernel model=gpt generate.batch_size=8" "decode=megakernel model=gpt_3x generate.batch_size=1"; do
  echo "== $args"; timeout 120 python run.py $R $args > $OUT/run.log 2>&1; echo rc $?
  grep -E "decode_tok_per_s|tok/s|parity|phase|rror" $OUT/run.log | tail -6
done
echo "== megakernel trace"; timeout 300 python .gpu/scratch/mk_trace.py > $OUT/mk_trace.log 2>&1; echo rc $?; grep -v Warning $OUT/mk_trace.log | tail -40
