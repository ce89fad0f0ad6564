# call 6: start-up on a cold page cache, the library read-ahead on/off; the norm's column sums in the train step
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache  # bytecode as a pip install leaves it
python -c "
import importlib.util; from pathlib import Path; from transformerop.cuda_early import libraries
L = libraries(Path(importlib.util.find_spec('torch').origin).parent.parent)
print(len(L), 'libraries', round(sum(p.stat().st_size for p in L) / 2**20), 'MiB:', ' '.join(p.name for p in L))"
df -h /tmp | tail -1; id -u
S="experiment=speedrun logger=none train.progress=false train.profile=false"
echo "== bytecode + Triton cache run (untimed)"; timeout 90 python run.py $S train.max_iters=20 hydra.run.dir=/tmp/w > /dev/null 2>&1; echo rc $?
i=0; for p in 1 0 1 0; do i=$((i+1))
  sync; if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then d=dropped; else d="drop refused"; fi
  echo "== speedrun $i prefetch=$p ($d)"; TRANSFORMEROP_PREFETCH=$p timeout 80 python run.py $S hydra.run.dir=/tmp/sr_$i > /tmp/sr_$i.log 2>&1; echo rc $?
  cp /tmp/sr_$i/results.json $OUT/speedrun_${i}_prefetch_$p.json 2>/dev/null
  grep -E "^startup|reached" /tmp/sr_$i.log
done
B="task=bench bench.target=train_step data=shakespeare model=gpt model.bias=false train.dtype=bfloat16 train.cuda_graph=true model.fused_norm=true logger=none train.progress=false"
cp -r data .gpu/base/ 2>/dev/null
for side in new base; do
  echo "== train_step $side"
  if [ $side = base ]; then (cd .gpu/base && PYTHONPATH=/tmp/site timeout 100 python run.py $B hydra.run.dir=/tmp/b_$side > /tmp/b.log 2>&1); else timeout 100 python run.py $B hydra.run.dir=/tmp/b_$side > /tmp/b.log 2>&1; fi
  echo rc $?; grep -E "correct|measured" /tmp/b.log | tail -2
done
