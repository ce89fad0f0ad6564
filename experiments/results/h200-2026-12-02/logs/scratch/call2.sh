set -o pipefail
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
R="384,6,6,1 384,6,6,8 768,12,12,4 1152,18,18,1 1152,18,18,8"
(cd .gpu/base && PYTHONPATH=".:$PYTHONPATH" timeout 200 python3 ../bench_persist.py base none $R) 2>&1 | tee $OUT/call2_base.log | grep ROW
PYTHONPATH=".:$PYTHONPATH" timeout 200 python3 .gpu/bench_persist.py new false $R 2>&1 | tee $OUT/call2_new.log | grep ROW
PYTHONPATH=".:$PYTHONPATH" timeout 200 python3 .gpu/bench_persist.py new true $R 2>&1 | tee $OUT/call2_pref.log | grep ROW
