# call 3: the cuBLASLt MLP's and the warm-ups' GPU tests; the speedrun lever sweep with the new best settings
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
git log --oneline -1 2>/dev/null
echo "== gpu tests"
timeout 110 python -m pytest -q --no-header -m gpu -p no:cacheprovider tests/test_cublaslt_mlp.py tests/test_kernel_warmups.py 2>&1 | tee $OUT/call3_tests.log | tail -25
echo "== speedrun sweep"
timeout 150 python run.py -m experiment=speedrun train.progress=false logger=none experiment/lever=best,cublaslt_mlp,no_master_weights hydra.sweep.dir=outputs/gpu_speedrun > $OUT/call3_speedrun_sweep.log 2>&1
echo rc $?
grep -E "^\s+\[" $OUT/call3_speedrun_sweep.log | tail -12
timeout 30 python -m transformerop.report outputs/gpu_speedrun --no-wandb > $OUT/call3_report.log 2>&1; head -20 $OUT/call3_report.log | cut -c1-400
tar czf $OUT/call3_sweep.tgz --exclude='*.pt' --exclude=trace.json --exclude=media outputs/gpu_speedrun
