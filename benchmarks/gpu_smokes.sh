#!/usr/bin/env bash
# Every method's smoke experiment on a CUDA GPU, AdaBERT's also in bf16, fp16 and under
# torchrun, then a prediction on the GPU: the check of the GPU path (docs/gpu.md).
# Needs the project installed and $NAS_DATA_DIR set (sst2/, snips/, wikitext2/).
# Usage: bash benchmarks/gpu_smokes.sh [RUNS_DIR]   (default: runs/gpu_smokes)
# Prints one line per run (exit status, wall time) and the failing frames of a failure.
set -u
runs=${1:-runs/gpu_smokes}
mkdir -p "$runs"

timed() {  # timed NAME COMMAND...: run, log to RUNS/NAME.log, print status and time
  local name=$1; shift
  local start=$SECONDS
  "$@" > "$runs/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc, $((SECONDS - start)) s"
  if [ "$rc" != 0 ]; then
    grep -E '^  File |Error|error' "$runs/$name.log" | grep -v site-packages | tail -8
  fi
}

for method in adabert compress search lanas efficientbert mobilebert tinybert mixedvocab; do
  timed "$method" python -m nas --debug run "experiments/${method}_smoke.yaml" \
    --device cuda --run-dir "$runs/$method" --no-progress
done
for precision in bf16 fp16; do
  timed "adabert_$precision" python -m nas --debug run experiments/adabert_smoke.yaml \
    --device cuda --set "precision=$precision" --run-dir "$runs/adabert_$precision" --no-progress
done
timed adabert_torchrun python -m torch.distributed.run --standalone --nproc_per_node=1 \
  -m nas --debug run experiments/adabert_smoke.yaml --device cuda \
  --run-dir "$runs/adabert_torchrun" --no-progress
timed predict python -m nas predict "$runs/adabert/export" "a gorgeous, witty, seductive movie" \
  --device cuda
tail -1 "$runs/predict.log"
