# call 2: tune the attention's sm_90 table (kernels/triton_tuned.json) at the speedrun's shapes; GPU tests;
# speedrun rows from a cold Triton cache (best = cuBLASLt MLP now, attention_triton with the table, erf_gelu); bench gates
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python -c "import torch,triton;print(torch.__version__, triton.__version__)"
echo "== tune"
export TRITON_CACHE_DIR=/tmp/triton_tune_cache; rm -rf $TRITON_CACHE_DIR
( time timeout 150 python -m kernels.triton_tuned 64,6,256,64 --dropout 0.2 ) 2>&1 | tail -8
( time timeout 100 python -m kernels.triton_tuned 512,6,256,64 --forward-only ) 2>&1 | tail -6
cp kernels/triton_tuned.json $OUT/triton_tuned.json
echo "== gpu tests"
timeout 120 python -m pytest -q --no-header -m gpu -p no:cacheprovider tests/test_triton_tuned.py tests/test_cublaslt_mlp.py 2>&1 | tee $OUT/call2_tests.log | tail -4
echo "== speedrun rows, cold Triton cache"
export TRITON_CACHE_DIR=/tmp/triton_cold_cache; rm -rf $TRITON_CACHE_DIR
timeout 240 python run.py -m experiment=speedrun train.progress=false logger=none experiment/lever=attention_triton,best,erf_gelu,attention_triton,best hydra.sweep.dir=outputs/gpu_speedrun2 > $OUT/call2_speedrun.log 2>&1
echo rc $?
grep -E "reached at|startup |profile:|^\s+\[|Error|error|measured" $OUT/call2_speedrun.log | cut -c1-200
for i in 0 1; do cp outputs/gpu_speedrun2/$i/results.json $OUT/call2_speedrun_$i.json 2>/dev/null; done
echo "== bench gates"
for lever in best attention_triton; do
timeout 90 python run.py task=bench bench.target=train_step experiment=speedrun experiment/lever=$lever logger=none hydra.run.dir=outputs/gpu_bench2_$lever > $OUT/call2_bench_$lever.log 2>&1
echo $lever rc $?
grep -E "correct|measured|Error" $OUT/call2_bench_$lever.log | cut -c1-220 | tail -3
done
