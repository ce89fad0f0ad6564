# speedrun's best settings from fresh processes (the first on the machine, then two more); GPU tests of the
# code not yet run on a GPU; PRE_* A/Bs through the decode_speed study at the rows that miss 1.5x
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
date +%T
for i in 0 1 2; do
  timeout 60 python3 run.py experiment=speedrun train.progress=false hydra.run.dir=outputs/s15/speedrun$i > $OUT/s15call1_speedrun$i.log 2>&1; echo "speedrun$i rc=$?"
  grep -E "startup|target|Error" $OUT/s15call1_speedrun$i.log | tail -4; cp outputs/s15/speedrun$i/results.json $OUT/s15call1_speedrun$i.results.json 2>/dev/null
done
date +%T
timeout 150 python3 -m pytest -q -m gpu tests/test_persistent_decode.py tests/test_cuda_early.py 2>&1 | tail -8 | tee $OUT/s15call1_pytest.log
date +%T
common="experiment=decode_speed decode=persistent logger=none train.progress=false"
run() { name=$1; t=$2; shift 2; timeout $t python3 run.py -m $common hydra.sweep.dir=outputs/s15/$name "$@" > $OUT/s15call1_$name.log 2>&1; echo "$name rc=$?"; python3 .gpu/rows.py outputs/s15/$name; date +%T; }
run pre_b1_3x 60 model=gpt_3x generate.batch_size=1 '++decode.tiles={},{PRE_FC:true,PRE_P2:true}'
run pre_b48 290 model=gpt_2x,gpt_3x generate.batch_size=8,4 '++decode.tiles={},{PRE_QKV:true,PRE_FC:true,PRE_P2:true},{PRE_FC:true,PRE_P2:true}'
tar czf $OUT/s15call1_sweeps.tgz --exclude='*.pt' --exclude=trace.json --exclude=media --exclude=wandb outputs/s15
date +%T
