# call 2 (clean tree 0bf233c): triton_tn's GPU test and kernel bench; train step B (triton_tn) A (split_k) B A;
# the norm backward's sweep (gate fixed); steps to the speedrun's target, dropout mix B against A (murmur3), 3 seeds
source .gpu/env.sh; export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%T
echo "== triton_tn GPU test + bench"
timeout 150 python -m pytest -v -p no:cacheprovider -m gpu tests/test_triton_tn.py tests/test_kernel_warmups.py tests/test_triton_norm.py > $OUT/c2_tn_test.log 2>&1; echo "rc $?"; grep -E "PASSED|FAILED|Error|assert" $OUT/c2_tn_test.log | head -8
timeout 90 python .gpu/scratch/tn_bench.py > $OUT/c2_tn_bench.log 2>&1; echo "rc $?"; cat $OUT/c2_tn_bench.log | tail -8
mkdir -p /tmp/newtn; cp transformerop/model/split_k.py transformerop/model/gpt.py /tmp/newtn/
swap_old() { cp .gpu/scratch/oldtn/split_k.py .gpu/scratch/oldtn/gpt.py transformerop/model/; }
swap_new() { cp /tmp/newtn/split_k.py /tmp/newtn/gpt.py transformerop/model/; }
bench() {
  timeout 100 python run.py task=bench bench.target=train_step experiment=speedrun logger=none \
    hydra.run.dir=outputs/c2_bench_$1 > $OUT/c2_bench_$1.log 2>&1
  echo "$1 rc $?"; grep -E "correct:|measured" $OUT/c2_bench_$1.log | cut -c1-180 | head -2; }
echo "== train step B A B A"; date -u +%T
for r in 1 2; do bench B$r; swap_old; bench A$r; swap_new; done
cmp -s /tmp/newtn/gpt.py transformerop/model/gpt.py && echo "B restored"
echo "== norm backward sweep"; date -u +%T
# .gpu/scratch/norm_bwd_sweep.py: ../h100-2026-12-07e/logs/scratch/norm_bwd_sweep.py patched by norm_bwd_sweep.patch
timeout 100 python .gpu/scratch/norm_bwd_sweep.py > $OUT/c2_norm_sweep.log 2>&1; echo "rc $?"
grep shipped $OUT/c2_norm_sweep.log; grep " us " $OUT/c2_norm_sweep.log | sort -t: -k2 -n | head -8; grep -c FAILED $OUT/c2_norm_sweep.log
date -u +%T
