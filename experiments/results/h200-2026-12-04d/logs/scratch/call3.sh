# call 4: gluon forward, warp-specialized (producer warp, 2 consumer warp groups)
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH
unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache
echo "== attn_lab"; timeout 280 python .gpu/scratch/attn_lab.py 2>&1 | grep -v Warning | tail -40
