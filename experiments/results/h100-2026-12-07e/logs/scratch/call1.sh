# call 1: the backward warm-up as a call of its own (B) vs through autograd (A) on a fresh machine's caches, B A B;
# a fresh-machine speedrun; the attention backward's time at the train shape by form; the GPU test suite
source .gpu/env.sh; export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
git log --oneline -1 2>/dev/null; python -c "import torch, triton; print(torch.__version__, triton.__version__)"
bash .gpu/scratch/callC.sh 2>&1 | tee $OUT/callC_console.log
echo "== attention backward forms"; date -u +%T
timeout 150 python .gpu/scratch/attn_bwd.py 2>&1 | tee $OUT/attn_bwd.log | grep -v Warning
echo "== gpu tests"; date -u +%T
timeout 280 python -m pytest -q -m gpu -p no:cacheprovider --durations=12 tests 2>&1 | tail -40 | tee $OUT/gpu_tests.log
date -u +%T
