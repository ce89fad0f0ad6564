# Prepared, not run: steps to the speedrun's target by seed, dropout's short mix (B, the tree's) against
# murmur3's finalizer (A: e518307^'s kernels/triton_dropout.py in .gpu/scratch/old/), three seeds each
source .gpu/env.sh; export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
cp kernels/triton_dropout.py /tmp/new_drop.py
run() {  # name seed
  timeout 45 python run.py experiment=speedrun train.progress=false logger=none train.profile=false seed=$2 \
    hydra.run.dir=outputs/seeds_$1 > $OUT/seeds_$1.log 2>&1
  echo "$1 rc $? $(grep -hoE 'reached at step [0-9]+ after [0-9.]+ s' $OUT/seeds_$1.log) | $(grep -oE 'step 1[0-9]{3}: val_loss [0-9.]+' $OUT/seeds_$1.log | grep -E ' 1(250|500):' | tr '\n' ' ')"; }
date -u +%T
for s in 1 2 3; do run B_s$s $s; done
cp .gpu/scratch/old/triton_dropout.py kernels/triton_dropout.py
for s in 1 2 3; do run A_s$s $s; done
cp /tmp/new_drop.py kernels/triton_dropout.py; cmp -s /tmp/new_drop.py kernels/triton_dropout.py && echo "B restored"
date -u +%T
