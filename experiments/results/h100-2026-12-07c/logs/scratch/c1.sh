# call 1: SPLIT_KV and PACK (W_proj head-major) correctness on the GPU; end-to-end by-hand A/Bs, each job a fresh process
# passing its parity gate first: SPLIT_KV at batch 8; the weight loops deeper and the MLP over all programs at gpt_3x b1
set -o pipefail
source .gpu/env.sh; export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
date -u +%T
echo "== gpu tests (split)"
timeout 120 python -m pytest -q -m gpu -p no:cacheprovider tests/test_persistent_decode.py -k split 2>&1 | tail -8
sw() {  # name, timeout, args...
  local name=$1 t=$2; shift 2; echo "== $name"; date -u +%T
  timeout $t python run.py -m experiment=decode_speed decode=persistent "$@" logger=none train.progress=false \
    hydra.sweep.dir=outputs/c1/$name > $OUT/c1_$name.log 2>&1; echo "sweep rc $?"; python .gpu/scratch/rows.py outputs/c1/$name
}
sw split_b8 150 model=gpt_3x,gpt_2x generate.batch_size=8 '++decode.tiles={},{SPLIT_KV:true,SHARED_O:true}'
sw deep_b1 150 model=gpt_3x generate.batch_size=1 \
  '++decode.tiles={},{STAGES:5},{PACK:true,STAGES:5},{SPAN_FC:35,STAGES:5},{SPAN_FC:35,STAGES:4}'
sw seed_b1 80 model=gpt generate.batch_size=1 '++decode.tiles={},{PACK:true}'
# sw deep_b8 100 model=gpt_3x,gpt_2x generate.batch_size=8 \
#  '++decode.tiles={PACK:true,STAGES:5},{SPLIT_KV:true,SHARED_O:true,PACK:true,STAGES:5}'
tar czf $OUT/c1.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/c1
date -u +%T
