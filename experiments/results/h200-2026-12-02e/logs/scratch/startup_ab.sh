# startup A/B: run.py (CUDA started early) against the same tree without the early start
set -o pipefail
sed '/cuda_early/d' run.py > run_noearly.py
CMD="experiment=speedrun train.progress=false train.profile=false logger=none"
timeout 60 python3 run.py $CMD > /dev/null 2>&1  # Triton cache, page cache
for i in 1 2 3; do
  for s in run.py run_noearly.py; do
    timeout 60 python3 $s $CMD 2>&1 | grep -E "startup|after" | sed "s|^|$s $i: |" | cut -c1-300
  done
done
rm -f run_noearly.py
