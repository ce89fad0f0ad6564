# call 4 (what the device time left allows): the cuBLASLt MLP's GPU tests; the speedrun's best row and its cublaslt_mlp row
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
echo "== gpu tests"
timeout 100 python -m pytest -q --no-header -m gpu -p no:cacheprovider tests/test_cublaslt_mlp.py 2>&1 | tee $OUT/call4_tests.log | tail -25
echo "== speedrun rows"
timeout 100 python run.py -m experiment=speedrun train.progress=false logger=none train.profile=false experiment/lever=best,cublaslt_mlp hydra.sweep.dir=outputs/gpu_speedrun > $OUT/call4_speedrun.log 2>&1
echo rc $?
grep -E "reached at|startup|train_step:|^\s+\[" $OUT/call4_speedrun.log | cut -c1-220
