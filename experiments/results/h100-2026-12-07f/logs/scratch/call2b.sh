# call 2b (clean tree 0bf233c; device time nearly spent): triton_tn and the norm backward on the GPU: tests, then the kernel bench
source .gpu/env.sh; export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%T
timeout 50 python -m pytest -v -p no:cacheprovider -m gpu tests/test_triton_tn.py tests/test_triton_norm.py > $OUT/c2b_tests.log 2>&1; echo "rc $?"
grep -E "PASSED|FAILED|Error|assert" $OUT/c2b_tests.log | head -8
timeout 35 python .gpu/scratch/tn_bench.py > $OUT/c2b_tn_bench.log 2>&1; echo "rc $?"; tail -7 $OUT/c2b_tn_bench.log
timeout 40 python -m pytest -v -p no:cacheprovider -m gpu tests/test_kernel_warmups.py > $OUT/c2b_warmups.log 2>&1; echo "rc $?"
grep -E "PASSED|FAILED|Error|assert" $OUT/c2b_warmups.log | head -6
date -u +%T
