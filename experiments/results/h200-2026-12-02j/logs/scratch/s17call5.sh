# the GPU tests of the changed code, then the speedrun study (one fresh process a job) at this commit
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
export PYTHONPATH=$PWD:$PYTHONPATH
date +%T
timeout 240 python3 -m pytest -q -m gpu tests/test_kernel_warmups.py tests/test_triton_norm.py tests/test_triton_mlp.py tests/test_train_graph.py tests/test_train.py 2>&1 | tee $OUT/s17call5_pytest.log | tail -6
date +%T
timeout 400 python3 run.py -m experiment=speedrun train.progress=false hydra.sweep.dir=outputs/s17/speedrun > $OUT/s17call5_speedrun.log 2>&1; echo "speedrun rc=$?"
grep -E "startup [0-9]|reached|Error|error" $OUT/s17call5_speedrun.log | tail -20 | cut -c1-250
tar czf $OUT/s17call5_speedrun.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/s17/speedrun
date +%T
