# call D: (1) a fresh machine's start-up from inside + cuBLASLt GPU tests (callC.sh); (2) weight streaming by
# layout (stream_bench.py); (3) decode=persistent with the qkv and MLP weights packed chunk by chunk (PACK) against
# the plan's row-major chunks, one sweep, 768 and 1152 wide, batch 1 and 8
set -o pipefail
bash .gpu/scratch/callC.sh 2>&1 | tail -30
source .gpu/env.sh >/dev/null 2>&1; export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
echo "== stream bench"; date -u +%T
timeout 200 python .gpu/scratch/stream_bench.py 2>&1 | tail -32
echo "== decode PACK A/B"; date -u +%T
timeout 240 python run.py -m experiment=decode_speed decode=persistent model=gpt_2x,gpt_3x generate.batch_size=1,8 \
  '++decode.tiles={},{PACK:true}' logger=none train.progress=false hydra.sweep.dir=outputs/callD/pack > $OUT/callD_pack.log 2>&1
echo "sweep rc $?"; python .gpu/scratch/rows.py outputs/callD/pack
tar czf $OUT/callD_pack.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/callD/pack
date -u +%T
