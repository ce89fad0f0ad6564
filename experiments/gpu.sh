#!/usr/bin/env bash
# Reproduce the GPU results in a few device calls (each stage fits one 10-minute call):
#   bash ../shared/device/prepare.sh            # once, here: wheels + data into .gpu/
#   device run, carry [".gpu"]:  source .gpu/env.sh && bash experiments/gpu.sh STAGE
# Stages: checks | decode | parity | studies [NAME...] | speedrun. Logs and reports go to $OUT
# (or ./outputs/gpu when $OUT is unset); experiments/results/<study>.md are written in place
# and must be copied back to be committed.
set -uo pipefail
out="${OUT:-outputs/gpu}"; mkdir -p "$out"
stage="${1:-checks}"; shift || true
py=python3
log() { tee -a "$out/$stage.log"; }

case "$stage" in
  checks)  # issue 3: kernels build (cold, then warm), every GPU test, the validation table
    $py -m kernels.cuda_build 2>&1 | log
    $py -m kernels.cuda_build 2>&1 | log
    $py -m pytest -q -m gpu -p no:cacheprovider 2>&1 | log
    $py run.py task=validate logger=none hydra.run.dir=outputs/gpu_validate 2>&1 | log ;;
  decode)  # issue 4: every decode path, 500 tokens, batch 1, the seed GPT (untrained weights)
    for dt in bfloat16 float32; do
      $py run.py -m task=generate decode=recompute,kv_cache,static,static_graph,compiled,fused data=shakespeare \
        model=gpt train.max_iters=0 train.eval_iters=1 train.checkpoint=false generate.tokens=500 \
        generate.batch_size=1 generate.repeats=3 train.dtype=$dt train.progress=false logger=none \
        hydra.sweep.dir=outputs/gpu_decode_$dt 2>&1 | log
      $py -m transformerop.report outputs/gpu_decode_$dt --no-wandb 2>&1 | log
    done ;;
  parity)  # issue 3: Shakespeare through triton reaches sdpa's val loss for the same steps
    $py run.py -m data=shakespeare model=gpt attention=sdpa,triton train.dtype=bfloat16 train.max_iters=2000 \
      train.progress=false logger=none hydra.sweep.dir=outputs/gpu_parity 2>&1 | log
    $py -m transformerop.report outputs/gpu_parity --no-wandb 2>&1 | log ;;
  studies)  # issue 6: each study, then its report published to experiments/results
    names=("$@"); [ ${#names[@]} -gt 0 ] || names=(addition batched_heads softmax_kernels attention_kernels \
      kv_cache_regime graph_overhead graphed_decode attention_end_to_end timer_distortion quality)
    for s in "${names[@]}"; do
      $py run.py -m experiment=$s logger=none train.progress=false hydra.sweep.dir=outputs/gpu_$s 2>&1 | log
      $py -m transformerop.report outputs/gpu_$s --no-wandb --publish experiments/results 2>&1 | log
    done
    tar czf "$out/results.tgz" experiments/results ;;
  speedrun)  # issue 7: time to val loss <= 1.47
    $py run.py -m experiment=speedrun logger=none train.progress=false hydra.sweep.dir=outputs/gpu_speedrun 2>&1 | log
    $py -m transformerop.report outputs/gpu_speedrun --no-wandb --publish experiments/results 2>&1 | log
    tar czf "$out/results.tgz" experiments/results ;;
  *) echo "unknown stage $stage (checks | decode | parity | studies [NAME...] | speedrun)" >&2; exit 2 ;;
esac
