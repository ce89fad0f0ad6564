# Prepared, not run. # call 3 (clean tree 410bbc5 on branch work-tn): triton_tn + norm GPU tests, triton_tn kernel bench, train step B (triton_tn) A (fe48fac's split_k/gpt) B A,
# the norm backward's sweep (gate fixed, atomic axis), its best form N B N in the step (scratch: apply_best.py), then steps to the speedrun's target, dropout mix B against A, 3 seeds
source .gpu/env.sh; export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%T
echo "== GPU tests"
timeout 150 python -m pytest -v -p no:cacheprovider -m gpu tests/test_triton_tn.py tests/test_kernel_warmups.py tests/test_triton_norm.py > $OUT/c3_tests.log 2>&1; echo "rc $?"; grep -E "PASSED|FAILED|Error|assert" $OUT/c3_tests.log | cut -c1-160 | head -10
echo "== tn bench"
timeout 60 python .gpu/scratch/tn_bench.py > $OUT/c3_tn_bench.log 2>&1; echo "rc $?"; tail -8 $OUT/c3_tn_bench.log
mkdir -p /tmp/newtn; cp transformerop/model/split_k.py transformerop/model/gpt.py /tmp/newtn/
swap_old() { cp .gpu/scratch/oldtn/split_k.py .gpu/scratch/oldtn/gpt.py transformerop/model/; }
swap_new() { cp /tmp/newtn/split_k.py /tmp/newtn/gpt.py transformerop/model/; }
bench() {
  timeout 80 python run.py task=bench bench.target=train_step experiment=speedrun logger=none \
    hydra.run.dir=outputs/c3_bench_$1 > $OUT/c3_bench_$1.log 2>&1
  echo "$1 rc $?"; grep -E "correct:|measured" $OUT/c3_bench_$1.log | cut -c1-200 | head -2; }
echo "== train step B A B A"; date -u +%T
for r in 1 2; do bench B$r; swap_old; bench A$r; swap_new; done
cmp -s /tmp/newtn/gpt.py transformerop/model/gpt.py && echo "B restored"
echo "== norm backward sweep"; date -u +%T
timeout 120 python .gpu/scratch/norm_bwd_sweep.py > $OUT/c3_norm_sweep.log 2>&1; echo "rc $?"
grep shipped $OUT/c3_norm_sweep.log; grep " us " $OUT/c3_norm_sweep.log | sort -t: -k2 -n | head -8; echo "failed: $(grep -c FAILED $OUT/c3_norm_sweep.log)"
echo "== train step N (the sweep's best norm form) B N"; date -u +%T
cp kernels/triton_norm.py /tmp/norm_b.py
python .gpu/scratch/apply_best.py $OUT/c3_norm_sweep.log && { bench N1; cp /tmp/norm_b.py kernels/triton_norm.py; bench B3; python .gpu/scratch/apply_best.py $OUT/c3_norm_sweep.log; bench N2; }
cp /tmp/norm_b.py kernels/triton_norm.py
echo "== seeds"; date -u +%T
cp kernels/triton_dropout.py /tmp/new_drop.py
run() {
  timeout 45 python run.py experiment=speedrun train.progress=false logger=none train.profile=false seed=$2 \
    hydra.run.dir=outputs/seeds_$1 > $OUT/seeds_$1.log 2>&1
  echo "$1 rc $? $(grep -hoE 'reached at step [0-9]+ after [0-9.]+ s' $OUT/seeds_$1.log) | $(grep -oE 'step 1[0-9]{3}: val_loss [0-9.]+' $OUT/seeds_$1.log | grep -E ' 1(250|500):' | tr '\n' ' ')"; }
for s in 1 2 3; do run B_s$s $s; done
cp .gpu/scratch/old/triton_dropout.py kernels/triton_dropout.py
for s in 1 2 3; do run A_s$s $s; done
cp /tmp/new_drop.py kernels/triton_dropout.py
date -u +%T
