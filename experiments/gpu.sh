#!/usr/bin/env bash
# Reproduce the GPU results in a few device calls (each stage fits one 10-minute call):
#   bash ../shared/device/prepare.sh            # once, here: wheels + data into .gpu/
#   device run, carry [".gpu"]:  source .gpu/env.sh && bash experiments/gpu.sh STAGE [ARGS]
# Stages:
#   calibrate          this GPU's ceilings (predictions read them; else datasheet values, labelled)
#   checks             kernel build (cold, then warm), every GPU test, task=validate
#   validate           task=validate alone
#   parity             Shakespeare through triton vs sdpa, same steps
#   speedrun [best]    the study's best settings as a user runs them: on a fresh machine (empty Triton
#                      and extension caches, twice) and warm (one fresh process, W&B on), then (unless
#                      `best`) its lever sweep (each job a fresh process)
#   levers             the GPU tests of the speedrun's levers and of the attention's packed-gradient and
#                      atomic-dQ backwards, then attention_kernels' triton rows with attention.dq=atomic
#   search [N]         the speedrun's Optuna search (hparams_search=speedrun, N trials; the `search`
#                      extra's wheels carried in .whl/, installed into /tmp/site first)
#   studies [NAME...]  each study's sweep (logger=none), its report published to experiments/results
#   ddp                the same per-GPU batch on 1 GPU and on 2 GPUs (torchrun, NCCL)
#   pack               sweep records + experiments/results into $OUT/gpu.tgz, to bring back
# On a 2-GPU machine two lists of stages can run side by side, one per GPU (CUDA_VISIBLE_DEVICES=0
# / 1): timing studies then share the host's 32 CPUs, not a GPU. Logs go to $OUT (or outputs/gpu).
set -uo pipefail
# Bytecode: the device image ships its Python packages without .pyc files and sets
# PYTHONDONTWRITEBYTECODE=1, so every process there compiles torch's Python anew (import torch
# took 3.9 s). A pip install writes bytecode; BYTECODE=1 (the default here) lets the first process
# write it under /tmp/pycache and later ones read it, as on such a machine. BYTECODE=0: as the image is.
if [ "${BYTECODE:-1}" = 1 ]; then unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pycache; fi
out="${OUT:-outputs/gpu}"; mkdir -p "$out"
stage="${1:-checks}"; shift || true
py=python3
log() { tee -a "$out/${stage}_gpu${CUDA_VISIBLE_DEVICES:-all}.log"; }

case "$stage" in
  calibrate)
    $py run.py task=calibrate logger=none hydra.run.dir=outputs/gpu_calibrate 2>&1 | log ;;
  checks)
    $py -m kernels.cuda_build 2>&1 | log
    $py -m kernels.cuda_build 2>&1 | log
    $py -m pytest -q -m gpu -p no:cacheprovider 2>&1 | log
    $py run.py task=validate logger=none hydra.run.dir=outputs/gpu_validate 2>&1 | log ;;
  validate)
    $py run.py task=validate logger=none hydra.run.dir=outputs/gpu_validate 2>&1 | log ;;
  speedrun)  # first as the image is (no bytecode), then a short untimed run that writes bytecode and
             # Triton's kernel cache, then a fresh machine after its pip install (bytecode written,
             # empty Triton and extension caches of their own) twice, the best settings twice and
             # (unless `best`) the lever sweep
    PYTHONDONTWRITEBYTECODE=1 env -u PYTHONPYCACHEPREFIX $py run.py experiment=speedrun train.progress=false \
      hydra.run.dir=outputs/gpu_speedrun_nobytecode 2>&1 | log
    $py run.py experiment=speedrun train.max_iters=20 train.profile=false logger=none train.progress=false \
      hydra.run.dir=/tmp/speedrun_warm >/dev/null 2>&1
    for i in 1 2; do
      fresh="$(mktemp -d)"
      TRITON_CACHE_DIR="$fresh/triton" TORCH_EXTENSIONS_DIR="$fresh/extensions" $py run.py experiment=speedrun \
        train.progress=false logger=none hydra.run.dir=outputs/gpu_speedrun_fresh$i 2>&1 | log
    done
    for i in 1 2; do
      $py run.py experiment=speedrun train.progress=false hydra.run.dir=outputs/gpu_speedrun_best$i 2>&1 | log
    done
    [ "${1:-}" = best ] || $py run.py -m experiment=speedrun train.progress=false hydra.sweep.dir=outputs/gpu_speedrun 2>&1 | log ;;
  levers)
    $py -m pytest -q -m gpu -p no:cacheprovider tests/test_master_weights.py tests/test_fused_step.py tests/test_triton_norm.py \
      tests/test_triton_head.py tests/test_kernel_warmups.py tests/test_train_graph.py tests/test_triton_attention_op.py \
      tests/test_triton_attention.py tests/test_gluon_attention.py 2>&1 | log
    $py run.py -m experiment=attention_kernels logger=none train.progress=false hydra.sweeper.params.attention=triton \
      attention.dq=atomic hydra.sweep.dir=outputs/gpu_attention_kernels_atomic 2>&1 | log
    $py -m transformerop.report outputs/gpu_attention_kernels_atomic --no-wandb 2>&1 | log ;;
  search)
    $py run.py -m experiment=speedrun hparams_search=speedrun hydra.sweeper.n_trials="${1:-6}" train.progress=false \
      hydra.sweep.dir=outputs/gpu_speedrun_search 2>&1 | log ;;
  parity)  # the seed GPT as configured (dropout 0.2, fused into the triton kernels too)
    $py run.py -m data=shakespeare model=gpt attention=sdpa,triton train.dtype=bfloat16 train.max_iters=2000 \
      train.progress=false logger=none hydra.sweep.dir=outputs/gpu_parity 2>&1 | log
    $py -m transformerop.report outputs/gpu_parity --no-wandb 2>&1 | log ;;
  studies)
    names=("$@"); [ ${#names[@]} -gt 0 ] || names=(addition quality decode_speed graphed_decode kv_cache_regime \
      graph_overhead batched_heads softmax_kernels attention_kernels attention_ladder attention_end_to_end timer_distortion speedrun)
    for s in "${names[@]}"; do
      $py run.py -m experiment=$s logger=none train.progress=false hydra.sweep.dir=outputs/gpu_$s 2>&1 | log
      $py -m transformerop.report outputs/gpu_$s --no-wandb --publish experiments/results 2>&1 | log
    done ;;
  ddp)
    common=(data=shakespeare model=gpt train.dtype=bfloat16 train.max_iters=600 train.eval_interval=600
            train.eval_iters=20 train.checkpoint=false train.progress=false logger=none)
    CUDA_VISIBLE_DEVICES=0 $py run.py "${common[@]}" hydra.run.dir=outputs/gpu_ddp/1gpu 2>&1 | log
    $py -m torch.distributed.run --standalone --nproc_per_node=2 run.py "${common[@]}" \
      hydra.run.dir=outputs/gpu_ddp/2gpu 2>&1 | log
    $py -m transformerop.report outputs/gpu_ddp --no-wandb 2>&1 | log ;;
  pack)
    cal="$($py -c 'import platformdirs; print(platformdirs.user_cache_dir("transformerop"))')/calibration"
    mkdir -p outputs/calibration && cp "$cal"/*.json outputs/calibration/ 2>/dev/null
    tar czf "$out/gpu.tgz" --exclude='*.pt' --exclude=trace.json --exclude='media' \
      experiments/results outputs/calibration $(ls -d outputs/gpu_* 2>/dev/null) ;;
  *) echo "unknown stage $stage (calibrate | checks | validate | parity | speedrun | levers | search [N] | studies [NAME...] | ddp | pack)" >&2; exit 2 ;;
esac
