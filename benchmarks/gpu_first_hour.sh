#!/usr/bin/env bash
# The GPU user's first hour, measured in one go on a CUDA machine (results: benchmarks/gpu_first_hour.md):
#   1. the new gpu-check checks: the GPU experiment on the Qwen2.5-1.5B shape, the memory pre-flight
#      against the CUDA peak at the 0.5B and 1.5B shapes with a real backward, and SFT MFU at 1.5B;
#   2. the memory pre-flight against measured training steps (benchmarks/memory_preflight.py);
#   3. the embedded default run on the GPU, timed (report.json: stage times, accuracy, tokens/s, MFU).
# Usage: bash benchmarks/gpu_first_hour.sh OUT_DIR [BUNDLE]   (PYTHON=python3; run from the repository
# root with rlvr importable: `make setup GPU=1`, or PYTHONPATH=<site>:src beside a preinstalled torch
# stack). BUNDLE: a .tgz of every record (reports, logs, tables; no weights) written at the end.
set -u
out=${1:-outputs/gpu_first_hour}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
stamp() { echo "[$(date +%H:%M:%S)] $*"; }

stamp "gpu_check: shape checks"
timeout "${CHECK_TIMEOUT:-240}" "$py" scripts/gpu_check.py --device cuda --only "GPU experiment" "memory: Qwen" "MFU" \
  --out "$out/checks" --results "$out/gpu_check.md" --timeout 150
stamp "gpu_check rc=$?"

stamp "memory grid"
timeout "${GRID_TIMEOUT:-150}" "$py" benchmarks/memory_preflight.py --device cuda --json "$out/memory.json" | tee "$out/memory.md"
stamp "memory grid rc=${PIPESTATUS[0]}"

stamp "default run"
start=$(date +%s)
timeout "${DEFAULT_TIMEOUT:-200}" "$py" run_pipeline.py training_loop.device=cuda "hydra.run.dir=$out/default" \
  > "$out/default.log" 2>&1
rc=$?
stamp "default run rc=$rc in $(( $(date +%s) - start )) s"
cp "$out/default/report.json" "$out/default_report.json" 2>/dev/null
tail -25 "$out/default.log"
if [ -n "${2:-}" ]; then
  (cd "$out" && find . \( -name '*.json' -o -name '*.md' -o -name '*.log' -o -name '*.jsonl' -o -name '*.yaml' -o -name '*.out' \) \
    -not -path '*/checkpoint*' -not -path '*/final/*' -print0 | tar czf "$2" --null -T -)
  stamp "bundle: $2"
fi
