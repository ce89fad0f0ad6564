# cold-Triton-cache A/B of the speedrun's start-up: 4b7595e (kernel warm-ups) vs 874901e (+ Triton's start while run.py imports)
set -o pipefail
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/pycache
P=$PYTHONPATH
NEW=$PWD
mkdir -p /tmp/old /tmp/runs6 && tar -xf .gpu/old_prev.tar -C /tmp/old && cp -r data /tmp/old/
for d in /tmp/old $NEW; do
  (cd $d && PYTHONPATH=$d:$P TRITON_CACHE_DIR=/tmp/tc_prime timeout 60 python3 -c "import torch, triton, hydra, wandb, transformerop.jobs, kernels.triton_norm; torch.zeros(1, device='cuda'); print('primed', '$d')")
done
date +%T
for i in 1 2 3; do
  for side in old new; do
    if [ $side = old ]; then d=/tmp/old; else d=$NEW; fi
    cache=$(mktemp -d /tmp/tc6_${side}${i}_XXXX)
    for run in cold warm; do
      if [ $i != 1 ] && [ $run = warm ]; then continue; fi
      echo "== $side $run $i"
      (cd $d && PYTHONPATH=$d:$P TRITON_CACHE_DIR=$cache timeout 150 python3 run.py experiment=speedrun train.progress=false train.profile=false hydra.run.dir=/tmp/runs6/${side}_${run}$i 2>&1 | tee /tmp/runs6/s17call6_${side}_${run}$i.log | grep -E "startup [0-9]|target val_loss|Error|error" | cut -c1-300)
    done
  done
done
date +%T
tar -czf $OUT/s17call6_runs.tgz -C /tmp runs6
