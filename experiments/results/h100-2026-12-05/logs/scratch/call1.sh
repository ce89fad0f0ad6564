# call 1: GPU tests of the levers built without a GPU; the speedrun lever sweep (one fresh process a row)
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
echo "== levers tests"
timeout 280 python -m pytest -q --no-header -m gpu -p no:cacheprovider tests/test_master_weights.py tests/test_fused_step.py tests/test_triton_norm.py \
      tests/test_triton_head.py tests/test_kernel_warmups.py tests/test_train_graph.py tests/test_triton_attention_op.py \
      tests/test_triton_attention.py 2>&1 | tee $OUT/levers_tests.log | tail -40
echo rc ${PIPESTATUS[0]} $?
echo "== speedrun sweep"
timeout 290 python run.py -m experiment=speedrun train.progress=false logger=none hydra.sweep.dir=outputs/gpu_speedrun > $OUT/speedrun_sweep.log 2>&1
echo rc ${PIPESTATUS[0]} $?
tail -30 $OUT/speedrun_sweep.log
timeout 30 python -m transformerop.report outputs/gpu_speedrun --no-wandb > $OUT/report.log 2>&1; tail -5 $OUT/report.log
tar czf $OUT/sweep.tgz --exclude='*.pt' --exclude=trace.json --exclude=media outputs/gpu_speedrun
