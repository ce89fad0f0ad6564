# gpt_2x batch 1 at the plan's qkv rule (for the study); start-up of the speedrun's best settings by phase and a cProfile of its main thread; bigger or deeper MLP
# chunks on the tensor cores at 1152 wide, batch 8 (the row furthest from 1.5x)
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
date +%T
timeout 45 python3 run.py -m experiment=decode_speed decode=persistent model=gpt_2x generate.batch_size=1 logger=none train.progress=false hydra.sweep.dir=outputs/gpu_decode_speed_2x_b1 > $OUT/s14call3_2x_b1.log 2>&1; echo "2x b1 rc=$?"
python3 .gpu/rows.py outputs/gpu_decode_speed_2x_b1
date +%T
args="experiment=speedrun train.max_iters=20 train.profile=false logger=none train.progress=false train.target_loss=null train.sample_tokens=0"
for i in 0 1 2; do timeout 40 python3 run.py $args hydra.run.dir=outputs/s14/startup$i 2>&1 | grep -E "startup [0-9]|Error" | tail -2; done
timeout 45 python3 -m cProfile -o $OUT/s14call3_startup.prof run.py $args hydra.run.dir=outputs/s14/startup_prof 2>&1 | grep -E "startup [0-9]|Error" | tail -2
python3 - <<'PY' > $OUT/s14call3_startup_prof.txt 2>&1
import os, pstats
p = pstats.Stats(os.environ["OUT"] + "/s14call3_startup.prof")
p.sort_stats("cumtime").print_stats(90)
p.sort_stats("tottime").print_stats(30)
PY
date +%T
timeout 100 python3 run.py -m experiment=decode_speed decode=persistent model=gpt_3x generate.batch_size=8 logger=none train.progress=false hydra.sweep.dir=outputs/s14/b8_chunks '++decode.tiles={BN_FC:64,BK_FC:256},{STAGES:4},{BN_FC:32,BK_FC:256}' > $OUT/s14call3_b8_chunks.log 2>&1; echo "chunks rc=$?"
python3 .gpu/rows.py outputs/s14/b8_chunks
tar czf $OUT/s14call3_sweeps.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/s14 outputs/gpu_decode_speed_2x_b1
date +%T
