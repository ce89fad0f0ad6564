# call 4: the fused MLP's kernel at two programs an SM (smaller tiles) or one a tile
source .gpu/env.sh && export PYTHONPATH=.:$PYTHONPATH PYTHONPYCACHEPREFIX=/tmp/pycache
echo "== mlp tiles C=384"; C=384 timeout 240 python .gpu/scratch/mlp_tiles.py > $OUT/mlp_tiles_384.log 2>&1; echo rc $?
grep -E "^(fwd|bwd|mlp|best|\{)" $OUT/mlp_tiles_384.log; grep -iE "error|Trace" $OUT/mlp_tiles_384.log | head -5
