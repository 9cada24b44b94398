#!/usr/bin/env bash
# One GPU lease for issue 46 ("GRPO at GPU speed"), run as one prepared script on an offline CUDA
# machine with torch 2.11 preinstalled (results: benchmarks/grpo_rollout.md):
#   1. the rollout table at the Qwen2.5-1.5B shape: transformers generate, its continuous batching,
#      vLLM colocate (benchmarks/grpo_rollout.py), one card, one lease;
#   2. the colocated weight sync checked (benchmarks/vllm_sync_check.py): full, LoRA,
#      and the negative control with the sync skipped;
#   3. SFT MFU at the 1.5B shape with packed long rows (TRL packing, padding-free), with and without
#      Liger's fused linear cross-entropy;
#   4. rollout=vllm_colocate on the default's, the 0.5B and the 1.5B shapes, LoRA and full;
#      evaluation/generator=vllm on CUDA; rollout=vllm_server on the same card.
# vLLM's wheel is large, so it may still be arriving in parts while the jobs that do not need it run:
# every vLLM job waits for $VLLM_READY (written once vllm imports), the others go first.
#
# Usage (repository root, rlvr and its wheels importable: PYTHONPATH=<site>:src):
#   bash benchmarks/gpu_rollout_lease.sh OUT_DIR
# Env: PYTHON (python3), VLLM_READY (a file; default OUT_DIR/vllm_ready), DEADLINE (epoch seconds:
# no job starts after it).
set -u
out=${1:?OUT_DIR}
py=${PYTHON:-python3}
ready=${VLLM_READY:-$out/vllm_ready}
deadline=${DEADLINE:-$(( $(date +%s) + 1500 ))}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1
# FlashInfer's top-p/top-k sampler compiles its kernels on first use (minutes, nvcc): the rollouts
# here sample with top_p=1 and no top_k, which vLLM's own sampler does without it.
export VLLM_USE_FLASHINFER_SAMPLER=0
stamp() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$out/lease.log"; }
in_time() { [ "$(date +%s)" -lt "$deadline" ] || { stamp "deadline passed: skipping $1"; return 1; }; }
wait_vllm() {
  while [ ! -f "$ready" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 5
  done
}
job() {  # job NAME TIMEOUT CMD...: run one job, its output in NAME.log, its exit status in lease.log
  local name=$1 limit=$2
  shift 2
  in_time "$name" || return 0
  stamp "start $name"
  local start
  start=$(date +%s)
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  stamp "end $name rc=$? in $(( $(date +%s) - start )) s"
}
rollout=("$py" benchmarks/grpo_rollout.py)
small=(--prompts 4 --generations 8 --tokens 128 --steps 2)

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.csv" 2>&1
"$py" -c "import torch, transformers, trl, peft; print(torch.__version__, transformers.__version__, trl.__version__, peft.__version__)" \
  > "$out/versions.txt" 2>&1

vllm_server_job() {  # rollout=vllm_server on the same card: TRL's `trl vllm-serve` beside the trainer
  in_time vllm_server || return 0
  local path
  path=$("$py" -c "from rlvr.model.loader import ShapeModel as S; print(S(architecture='qwen2_5_0_5b', seed=42, dtype='bfloat16', trust_remote_code=False, use_safetensors=True, lora=None, quantization=None, gradient_checkpointing=False).model_path())")
  "$py" -m trl.cli.main vllm-serve --model "$path" --gpu-memory-utilization 0.3 --port 8000 > "$out/vllm_server_serve.log" 2>&1 &
  local server=$!
  job rollout_vllm_server 420 "${rollout[@]}" --backends vllm_server --architecture qwen2_5_0_5b "${small[@]}" \
    --out "$out/rollout_server" --json "$out/rollout_vllm_server.json"
  kill "$server" 2>/dev/null
  wait "$server" 2>/dev/null
}
non_vllm_jobs() {
  job rollout_hf 600 "${rollout[@]}" --backends hf,hf_continuous --out "$out/rollout" --json "$out/rollout_hf.json"
}
mfu_jobs() {
  local sft=(model=shape model.architecture=qwen2_5_1_5b model.dtype=bfloat16 training_loop.device=cuda
    data.task=gsm_symbolic data.train_size=2048 data.eval_size=8 training_loop.grpo.enabled=false
    evaluation.baseline=false evaluation.max_new_tokens=8 training_loop.sft.max_steps=8
    training_loop.sft.save_strategy=no training_loop.sft.gradient_accumulation_steps=4)
  job mfu_packed 300 "$py" run_pipeline.py "${sft[@]}" training_loop.sft.packing=true \
    training_loop.sft.padding_free=true training_loop.sft.max_length=2048 \
    training_loop.sft.per_device_train_batch_size=4 "hydra.run.dir=$out/mfu_packed"
  job mfu_packed_liger 300 "$py" run_pipeline.py "${sft[@]}" training_loop.sft.packing=true \
    training_loop.sft.padding_free=true training_loop.sft.max_length=2048 \
    training_loop.sft.per_device_train_batch_size=4 +training_loop.sft.use_liger_kernel=true \
    "hydra.run.dir=$out/mfu_packed_liger"
  job mfu_padded 300 "$py" run_pipeline.py "${sft[@]}" training_loop.sft.max_length=512 \
    training_loop.sft.per_device_train_batch_size=64 "hydra.run.dir=$out/mfu_padded"
}
vllm_jobs() {
  wait_vllm || { stamp "vllm never became ready"; return; }
  job rollout_vllm 600 "${rollout[@]}" --backends vllm_colocate --out "$out/rollout" --json "$out/rollout_vllm.json"
  job sync_full 300 "$py" benchmarks/vllm_sync_check.py --out "$out/sync_full"
  job sync_skipped 300 "$py" benchmarks/vllm_sync_check.py --skip-sync --out "$out/sync_skipped"
  job sync_lora 300 "$py" benchmarks/vllm_sync_check.py --lora --out "$out/sync_lora"
  for arch in smollm2_135m qwen2_5_0_5b; do
    job "shape_${arch}_lora" 300 "${rollout[@]}" --backends vllm_colocate --architecture "$arch" "${small[@]}" \
      --out "$out/shape_${arch}_lora" --json "$out/shape_${arch}_lora.json"
    job "shape_${arch}_full" 300 "${rollout[@]}" --backends vllm_colocate --architecture "$arch" "${small[@]}" --no-lora \
      --out "$out/shape_${arch}_full" --json "$out/shape_${arch}_full.json"
  done
  job shape_qwen2_5_1_5b_full 300 "${rollout[@]}" --backends vllm_colocate --no-lora "${small[@]}" \
    --out "$out/shape_qwen2_5_1_5b_full" --json "$out/shape_qwen2_5_1_5b_full.json"
  # sleep mode: vLLM frees its weights and KV cache while the trainer steps (TRL sleeps it at level 2)
  job rollout_vllm_sleep 600 "${rollout[@]}" --backends vllm_colocate --out "$out/rollout_sleep" \
    --json "$out/rollout_vllm_sleep.json" training_loop.grpo.vllm_enable_sleep_mode=true
  vllm_server_job
  job eval_vllm 300 "$py" run_pipeline.py model=shape model.architecture=qwen2_5_0_5b training_loop.device=cuda \
    evaluation/generator=vllm data.eval_size=64 training_loop.sft.max_steps=4 training_loop.grpo.max_steps=2 \
    evaluation.sampled=null "hydra.run.dir=$out/eval_vllm"
}

non_vllm_jobs
if [ -f "$ready" ]; then vllm_jobs; mfu_jobs; else mfu_jobs; vllm_jobs; fi
"$py" benchmarks/grpo_rollout.py --merge "$out/rollout_hf.json" "$out/rollout_vllm.json" > "$out/rollout_table.md" 2>&1
stamp "all done"
