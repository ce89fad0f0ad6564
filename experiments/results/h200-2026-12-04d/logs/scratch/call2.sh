# call 3: gluon forward, FA3 order (S_j, P_{j-1}V_{j-1}, wait 1, softmax)
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
echo "== attn_lab"; timeout 280 python .gpu/scratch/attn_lab.py 2>&1 | grep -v Warning | tail -40
