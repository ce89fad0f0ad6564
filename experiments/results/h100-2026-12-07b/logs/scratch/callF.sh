# call F: decode=persistent, the plan's row-major weights against PACK (qkv and MLP chunks one run each, W_proj
# head-major), and PACK with the weight loops four deep; every size of decode_speed at batch 1 and 8, 1152 wide at 4
set -o pipefail
source .gpu/env.sh >/dev/null 2>&1; export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name --format=csv,noheader; date -u +%T
ab() {  # name, then overrides
  local n=$1; shift
  timeout 330 python run.py -m experiment=decode_speed decode=persistent "$@" \
    '++decode.tiles={},{PACK:true},{PACK:true,STAGES:4}' logger=none train.progress=false \
    hydra.sweep.dir=outputs/callF/$n > $OUT/callF_$n.log 2>&1
  echo "$n rc $?"; python .gpu/scratch/rows.py outputs/callF/$n | cut -c1-260
  tar czf $OUT/callF_$n.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/callF/$n; }
ab sizes model=gpt,gpt_2x,gpt_3x generate.batch_size=1,8
ab b4 model=gpt_3x generate.batch_size=4
date -u +%T
