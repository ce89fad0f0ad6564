# the review mends (bfca30f): the GPU tests of the warm-ups and one speedrun on an empty Triton cache
set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
export PYTHONPATH=$PWD:$PYTHONPATH
date +%T
timeout 200 python3 -m pytest -q -m gpu tests/test_kernel_warmups.py tests/test_cuda_early.py tests/test_triton_norm.py 2>&1 | tee $OUT/s17call7_pytest.log | tail -3
TRITON_CACHE_DIR=$(mktemp -d) timeout 120 python3 run.py experiment=speedrun train.progress=false train.profile=false hydra.run.dir=/tmp/r7 2>&1 | tee $OUT/s17call7_speedrun_cold.log | grep -E "startup [0-9]|target val_loss|warm-up failed|Error" | cut -c1-300
date +%T
