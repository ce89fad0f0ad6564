# call 2: Triton matmul forms at the MLP's shape against cuBLAS; decode=persistent REPS at 768 wide, batch 1
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH PYTHONPYCACHEPREFIX=/tmp/pycache
echo "== mm bench C=384"; C=384 timeout 300 python .gpu/scratch/mm_bench.py > $OUT/mm_bench_384.log 2>&1; echo rc $?
grep -vi warn $OUT/mm_bench_384.log | tail -80
R="experiment=decode_speed logger=none train.progress=false generate.profile=false decode=persistent"
for args in "model=gpt_2x generate.batch_size=1 +decode.tiles.REPS=1" "model=gpt_2x generate.batch_size=1 +decode.tiles.REPS=4" \
            "model=gpt_2x generate.batch_size=1 +decode.tiles.REPS=1" "model=gpt_2x generate.batch_size=1 +decode.tiles.REPS=4"; do
  echo "== $args"; timeout 120 python run.py $R $args > $OUT/run.log 2>&1; echo rc $?
  grep -E "tok/s|parity|rror" $OUT/run.log | tail -3
done
