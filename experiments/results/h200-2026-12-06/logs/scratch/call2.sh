# call 2: where the speedrun's start-up goes on this host. On a fresh machine: the cuBLASLt
# extension's build alone, then one speedrun (its Triton kernels' first compiles; this fills the
# caches); then the warm speedrun three times (fresh processes) for the spread of startup_s; the
# project's imports by module (-X importtime); the main thread's start-up under cProfile (a short
# run, off the record).
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; nproc
export TORCH_EXTENSIONS_DIR=/tmp/ext2 TRITON_CACHE_DIR=/tmp/triton2; rm -rf $TORCH_EXTENSIONS_DIR $TRITON_CACHE_DIR
echo "== cold: the cuBLASLt extension's build alone"
timeout 120 python -c "
import time, torch; torch.cuda.init(); t = time.perf_counter()
from kernels import cublaslt_mlp; cublaslt_mlp._ext(); print(f'cuBLASLt extension build + load: {time.perf_counter() - t:.2f} s')"
echo "== cold Triton cache, extension built: one speedrun"
timeout 100 python run.py experiment=speedrun train.progress=false logger=none hydra.run.dir=outputs/cold_triton > $OUT/call2_cold_triton.log 2>&1
echo rc $?; grep -E "reached at|startup " $OUT/call2_cold_triton.log | cut -c1-220
for i in 1 2 3; do
  echo "== warm speedrun $i"
  timeout 40 python run.py experiment=speedrun hydra.run.dir=outputs/warm$i > $OUT/call2_warm$i.log 2>&1
  echo rc $?; grep -E "reached at|startup " $OUT/call2_warm$i.log | cut -c1-220
done
echo "== imports (-X importtime, top by cumulative us)"
python -X importtime -c "import transformerop.jobs, transformerop.tracking, transformerop.config" 2> $OUT/call2_importtime.txt
sort -t'|' -k2 -n $OUT/call2_importtime.txt | tail -12
echo "== cProfile of a short speedrun (main thread)"
timeout 50 python -m cProfile -o $OUT/call2_startup.prof run.py experiment=speedrun train.max_iters=3 train.target_loss=null \
  train.profile=false train.eval_interval=1000 logger=none hydra.run.dir=outputs/prof > $OUT/call2_prof.log 2>&1
echo rc $?
python - <<'PY'
import os, pstats
p = pstats.Stats(os.environ["OUT"] + "/call2_startup.prof")
p.sort_stats("cumulative").print_stats(40)
PY
date -u
