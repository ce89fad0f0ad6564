# the speedrun study (one fresh process a job) at this commit; forward-attention A/B: TMA descriptor loads and
# the next block's scores before this block's softmax, against our kernel and SDPA
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
date +%T
timeout 330 python3 run.py -m experiment=speedrun train.progress=false hydra.sweep.dir=outputs/s15/speedrun > $OUT/s15call2_speedrun.log 2>&1; echo "speedrun rc=$?"
grep -E "startup [0-9]|reached|Error|error" $OUT/s15call2_speedrun.log | tail -20
tar czf $OUT/s15call2_speedrun.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/s15/speedrun
date +%T
timeout 240 python3 .gpu/bench_attn_fwd.py 1024x128,2048x128,256x64,1024x64 2>&1 | tee $OUT/s15call2_attn.log | grep -E "ROW|err|FAIL|WRONG|Error" | head -60
date +%T
