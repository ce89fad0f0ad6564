# at the warm-up commit: GPU tests of cuda_early; start-up A/B (run.py vs run.py without cuda_early.warm());
# then the speedrun study sweep
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
date +%T
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_cuda_early.py 2>&1 | tee $OUT/s8call3_pytest.log | tail -2
cp .gpu/run_nowarm.py run_nowarm.py
A="experiment=speedrun train.progress=false train.profile=false logger=none"
timeout 60 python3 run.py $A 2>&1 | grep -E "startup|reached" | sed 's/^/warmup run.py: /' | tee -a $OUT/s8call3_startup.log
for i in 1 2 3; do
  for s in run.py run_nowarm.py; do
    timeout 60 python3 $s $A 2>&1 | grep -E "startup|reached" | sed "s/^/$s $i: /" | tee -a $OUT/s8call3_startup.log
  done
done
rm run_nowarm.py
date +%T
timeout 330 python3 run.py -m experiment=speedrun train.progress=false hydra.sweep.dir=outputs/gpu_speedrun 2>&1 | tee $OUT/s8call3_speedrun.log | grep -E "startup|reached|Error|error" | tail -30
tar czf $OUT/s8call3_speedrun.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/gpu_speedrun
date +%T
