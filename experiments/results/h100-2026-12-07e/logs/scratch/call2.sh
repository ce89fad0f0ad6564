# call 2: dropout's keep decision as a shorter mix (B) against murmur3's full finalizer (A, .gpu/scratch/old/):
# correctness on the GPU first, then the attention backward by tile (kernel bench), then the train step B A B A
source .gpu/env.sh; export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%T
git diff --stat HEAD 2>/dev/null | tail -1
echo "== correctness (B)"
timeout 200 python -m pytest -q -p no:cacheprovider tests/test_dropout_hash.py tests/test_triton_norm.py tests/test_gluon_attention.py \
  "tests/test_triton_attention.py::test_gpu_dropout" "tests/test_triton_attention.py::test_gpu_training_tracks_sdpa" \
  -m "gpu or not gpu" 2>&1 | tail -5 | tee $OUT/call2_tests.log
cp kernels/triton_dropout.py /tmp/new_drop.py
swap_old() { cp .gpu/scratch/old/triton_dropout.py kernels/triton_dropout.py; }
swap_new() { cp /tmp/new_drop.py kernels/triton_dropout.py; }
echo "== attention backward by tile, B then A"; date -u +%T
timeout 110 python .gpu/scratch/attn_bwd.py extra > $OUT/attn_bwd_B.log 2>&1; echo "B rc $?"
swap_old; timeout 110 python .gpu/scratch/attn_bwd.py extra > $OUT/attn_bwd_A.log 2>&1; echo "A rc $?"; swap_new
paste <(grep -E "^(bwd|fwd)" $OUT/attn_bwd_B.log | cut -c1-100) <(grep -E "^(bwd|fwd)" $OUT/attn_bwd_A.log | sed 's/^.*} *//;s/^bwd p=0.[02] dq=query_tiles (tuned) *//;s/^fwd p=0.[02] //' | cut -c1-40)
bench() {  # name
  timeout 100 python run.py task=bench bench.target=train_step experiment=speedrun logger=none \
    hydra.run.dir=outputs/call2_bench_$1 > $OUT/call2_bench_$1.log 2>&1
  echo "$1 rc $?"; grep -E "correct:|measured|gate|grad err" $OUT/call2_bench_$1.log | cut -c1-200 | head -3; }
echo "== train step B A B A"; date -u +%T
for r in 1 2; do bench B$r; swap_old; bench A$r; swap_new; done
cmp -s /tmp/new_drop.py kernels/triton_dropout.py && echo "B restored"
date -u +%T
echo "== GPU tests not reached in call 1"
timeout 100 python -m pytest -q -m gpu -p no:cacheprovider tests/test_megakernel.py tests/test_persistent_decode.py \
  tests/test_train_graph.py tests/test_triton_attention_op.py tests/test_triton_head.py tests/test_triton_mlp.py \
  tests/test_triton_tuned.py 2>&1 | tail -6 | tee $OUT/call2_gpu_tests.log
date -u +%T
