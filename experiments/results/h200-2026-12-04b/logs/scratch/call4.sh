# call 4 (from the commit after 5947fd7): the megakernel without its producer warp
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH PYTHONPYCACHEPREFIX=/tmp/pycache
echo "== gpu tests"; timeout 420 python -m pytest -q -m gpu tests/test_megakernel.py 2>&1 | tail -4
R="experiment=decode_speed logger=none train.progress=false"
for args in "model=gpt generate.batch_size=1" "model=gpt generate.batch_size=8" "model=gpt_2x generate.batch_size=1" \
            "model=gpt_3x generate.batch_size=1" "model=gpt_3x generate.batch_size=8"; do
  echo "== decode=megakernel $args"; timeout 120 python run.py $R decode=megakernel $args > $OUT/run.log 2>&1; echo rc $?
  grep -E "tok/s|parity|phase|rror" $OUT/run.log | tail -4
done
echo "== megakernel trace"; timeout 300 python .gpu/scratch/mk_trace.py > $OUT/mk_trace.log 2>&1; echo rc $?; grep -v Warning $OUT/mk_trace.log | tail -40
