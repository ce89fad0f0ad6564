# the cold-Triton-cache A/B of the speedrun's start-up again, with the old tree's experiment files (b9595e0 vs HEAD)
set -o pipefail
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/pycache
P=$PYTHONPATH
NEW=$PWD
mkdir -p /tmp/old /tmp/runs && tar -xf .gpu/old_b9595e0.tar -C /tmp/old && cp -r data /tmp/old/
for d in /tmp/old $NEW; do
  (cd $d && PYTHONPATH=$d:$P TRITON_CACHE_DIR=/tmp/tc_prime timeout 60 python3 -c "import torch, triton, hydra, wandb, transformerop.jobs, kernels.triton_norm; torch.zeros(1, device='cuda'); print('primed', '$d')")
done
date +%T
for i in 1 2 3; do
  for side in old new; do
    if [ $side = old ]; then d=/tmp/old; else d=$NEW; fi
    cache=/tmp/tc_${side}$i; mkdir -p $cache
    for run in cold warm; do
      if [ $i != 1 ] && [ $run = warm ]; then continue; fi
      echo "== $side $run $i"
      (cd $d && PYTHONPATH=$d:$P TRITON_CACHE_DIR=$cache timeout 150 python3 run.py experiment=speedrun train.progress=false train.profile=false hydra.run.dir=/tmp/runs/${side}_${run}$i 2>&1 | tee /tmp/runs/s17call3_${side}_${run}$i.log | grep -E "startup [0-9]|target val_loss|train_step:|Error|error" | cut -c1-300)
    done
  done
done
date +%T
tar -czf $OUT/s17call3_runs.tgz -C /tmp runs
