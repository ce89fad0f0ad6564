# call 1: the fused MLP kernel's tiles against cuBLAS + eager GELU; decode=persistent REPS 1 vs 8
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
echo "== mlp bench C=384"; C=384 timeout 200 python .gpu/scratch/mlp_bench.py > $OUT/mlp_bench_384.log 2>&1; echo rc $?
grep -E "^(fwd|bwd) " $OUT/mlp_bench_384.log; grep -A3 cublas $OUT/mlp_bench_384.log | head -20
R="experiment=decode_speed logger=none train.progress=false generate.profile=false decode=persistent"
for args in "model=gpt generate.batch_size=1 +decode.tiles.REPS=1" "model=gpt generate.batch_size=1 +decode.tiles.REPS=8" \
            "model=gpt generate.batch_size=1 +decode.tiles.REPS=1" "model=gpt generate.batch_size=1 +decode.tiles.REPS=8" \
            "model=gpt generate.batch_size=1 +decode.tiles.REPS=4" \
            "model=gpt generate.batch_size=4 +decode.tiles.REPS=1" "model=gpt generate.batch_size=4 +decode.tiles.REPS=8" \
            "model=gpt_3x generate.batch_size=1 +decode.tiles.REPS=1" "model=gpt_3x generate.batch_size=1 +decode.tiles.REPS=8" \
            "model=gpt_3x generate.batch_size=8 +decode.tiles.REPS=1" "model=gpt_3x generate.batch_size=8 +decode.tiles.REPS=4"; do
  echo "== $args"; timeout 120 python run.py $R $args > $OUT/run.log 2>&1; echo rc $?
  grep -E "tok/s|parity|rror" $OUT/run.log | tail -3
done
echo "== mlp bench C=768"; C=768 M=8192 timeout 150 python .gpu/scratch/mlp_bench.py > $OUT/mlp_bench_768.log 2>&1; echo rc $?
grep -E "^(fwd|bwd) " $OUT/mlp_bench_768.log
