#!/usr/bin/env bash
# The embedded default run on a CUDA GPU, toward <= 60 s with no loss of accuracy (results:
# benchmarks/gpu_first_hour.md, "Session 19"). One lease, each variant against the same-lease baseline:
#   base     the recipe as on a CPU (640 SFT steps of 16 rows, 16 GRPO steps)
#   (torch_compile=true was tried on 2026-11-27: 88 s to compile the first step, and it recompiles as the
#   rows change length, so it is not run again)
#   b32      training_loop.sft.cuda_batch_size=32 (320 steps, the square-root learning-rate rule)
#   b64lin   cuda_batch_size=64 with the linear rule (lr 1.2e-3; the square-root rule lost 20 points)
#   log16    the base recipe logging every 16th SFT step (a log is a device sync and a TrainStep event)
# Usage: bash benchmarks/gpu_default_speed.sh OUT_DIR [BUNDLE] (PYTHON=python3; from the repository root
# with rlvr importable). DEADLINE=seconds: variants that would start past it are skipped. Each variant
# leaves OUT_DIR/<name>.report.json, its log and a line in OUT_DIR/summary.txt (wall, SFT, accuracy);
# SUMMARY=<file>: each line is copied there too as it is written (a lease's $OUT: what is there comes
# back even when the call is killed). A variant is killed 15 s past its limit (a SIGTERM waits for the
# step in flight, which under torch.compile can be minutes).
set -u
out=${1:-outputs/gpu_default_speed}
py=${PYTHON:-python3}
deadline=${DEADLINE:-480}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
began=$(date +%s)
note() {
  echo "[$(date +%H:%M:%S)] $*" | tee -a "$out/summary.txt"
  if [ -n "${SUMMARY:-}" ]; then cp "$out/summary.txt" "$SUMMARY"; fi
}

variant() {  # name timeout overrides...
  local name=$1 limit=$2 start rc
  shift 2
  if (( $(date +%s) - began + limit / 2 > deadline )); then
    note "$name skipped: past the ${deadline}-s deadline"
    return
  fi
  start=$(date +%s)
  timeout -k 15 "$limit" "$py" run_pipeline.py training_loop.device=cuda "hydra.run.dir=$out/$name" "$@" \
    > "$out/$name.log" 2>&1
  rc=$?
  cp "$out/$name/report.json" "$out/$name.report.json" 2>/dev/null
  rm -rf "$out/$name/checkpoints" "$out/$name/final" 2>/dev/null
  note "$name rc=$rc in $(( $(date +%s) - start )) s: $("$py" - "$out/$name.report.json" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except OSError:
    print("no report")
    sys.exit()
acc = ", ".join(f"{e['label']} {e['accuracy']:.1%} (n={e['n']})" for e in r.get("accuracy", []))
sft = r.get("throughput", {}).get("sft") or {}
print(f"wall {r.get('wall_seconds')} s, train {r.get('train_seconds')}, steps {r.get('steps')}, "
      f"accuracy {acc}; sft {sft.get('tokens_per_second')} tokens/s, MFU {sft.get('mfu')}")
EOF
)"
}

note "start on $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null)"
variant base 170 training_loop.sft.cuda_batch_size=null
variant b32 110 training_loop.sft.cuda_batch_size=32
variant b64lin 90 training_loop.sft.cuda_batch_size=64 training_loop.sft.learning_rate=6e-4
variant log16 130 training_loop.sft.cuda_batch_size=null training_loop.sft.logging_steps=16
note "done"
if [ -n "${2:-}" ]; then
  (cd "$out" && find . \( -name '*.json' -o -name '*.log' -o -name '*.jsonl' -o -name '*.txt' -o -name '*.md' \) \
    -not -path '*/checkpoint*' -print0 | tar czf "$2" --null -T -)
fi
