#!/usr/bin/env bash
# The GPU kept busy, measured in one go on a CUDA machine (results: benchmarks/gpu_first_hour.md):
#   1. the default run with SFT's cuda_batch_size (64 rows a step, a quarter of the steps): time and accuracy;
#   2. SFT MFU of the Qwen2.5-1.5B shape (bf16 weights, full fine-tune): 128 rows a step, and 64 x 4 accumulated;
#   3. the GPU experiment (gsm_symbolic_gpu, 1.5B shape, LoRA) for a few GRPO steps;
#   4. the default run with cuda_batch_size=null (the CPU recipe on the GPU), the baseline of (1).
# Usage: bash benchmarks/gpu_busy.sh OUT_DIR   (PYTHON=python3; from the repository root with rlvr
# importable). Each stage leaves its report.json, log and a line in OUT_DIR/summary.txt as it ends.
set -u
out=${1:-outputs/gpu_busy}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
stamp() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$out/summary.txt"; }

run() {  # name timeout overrides...
  local name=$1 limit=$2
  shift 2
  local start
  start=$(date +%s)
  timeout "$limit" "$py" run_pipeline.py "hydra.run.dir=$out/$name" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  stamp "$name rc=$rc in $(( $(date +%s) - start )) s"
  cp "$out/$name/report.json" "$out/$name.report.json" 2>/dev/null
  rm -rf "$out/$name/checkpoints" "$out/$name/final" "$out/$name/hf" 2>/dev/null
  tail -6 "$out/$name.log"
}

stamp "start on $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null)"
run default_b64 "${DEFAULT_TIMEOUT:-150}" training_loop.device=cuda
mfu=(model=shape model.architecture=qwen2_5_1_5b model.dtype=bfloat16 training_loop.sft.cuda_batch_size=null
  training_loop.sft.max_steps=12 training_loop.grpo.enabled=false evaluation.baseline=false data.eval_size=8
  training_loop.sft.save_strategy=no training_loop.sft.max_length=128)
run mfu_1_5b_b128 "${MFU_TIMEOUT:-150}" "${mfu[@]}" training_loop.sft.per_device_train_batch_size=128
run mfu_1_5b_b64x4 "${MFU_TIMEOUT:-150}" "${mfu[@]}" training_loop.sft.per_device_train_batch_size=64 \
  training_loop.sft.gradient_accumulation_steps=4
run gpu_experiment "${EXPERIMENT_TIMEOUT:-200}" experiment=gsm_symbolic_gpu model=shape model.architecture=qwen2_5_1_5b \
  "model.lora={r: 16, lora_alpha: 32, target_modules: [q_proj, k_proj, v_proj, o_proj]}" \
  training_loop.signal.skip_zero_advantage=false data.train_size=64 data.eval_size=8 evaluation.baseline=false \
  training_loop.grpo.max_steps=4 training_loop.grpo.save_strategy=no training_loop.grpo.gradient_accumulation_steps=1
run default_b16 "${DEFAULT_TIMEOUT:-150}" training_loop.device=cuda training_loop.sft.cuda_batch_size=null
stamp "done"
