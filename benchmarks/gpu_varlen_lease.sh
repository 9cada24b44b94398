#!/usr/bin/env bash
# One GPU lease for issue 46's open rows (results: benchmarks/gpu_varlen_lease.md), run as one prepared
# script on an offline CUDA machine with torch 2.11 preinstalled:
#   1. model.attn_implementation=varlen checked against padded sdpa (benchmarks/varlen_check.py);
#   2. SFT MFU at the Qwen2.5-1.5B shape with packed rows through varlen, with and without Liger;
#   3. vLLM colocate with sleep mode (training_loop.grpo.vllm_enable_sleep_mode=true) and without, at
#      the rollout table's shape, the card's memory sampled by nvidia-smi every 0.5 s;
#   4. rollout=vllm_server on the same card (`trl vllm-serve` beside the trainer).
# vLLM's wheels may still be arriving in parts while the jobs that do not need vLLM run: a vLLM job
# runs once $VLLM_READY exists (written when vllm imports), the others fill the wait.
#
# Usage (repository root, rlvr and its wheels importable: PYTHONPATH=<site>:src):
#   bash benchmarks/gpu_varlen_lease.sh OUT_DIR
# Env: PYTHON (python3), VLLM_READY (default OUT_DIR/vllm_ready), DEADLINE (epoch seconds: no job
# starts after it; a job's own limit is cut to end by DEADLINE + 60 s).
set -u
out=${1:?OUT_DIR}
py=${PYTHON:-python3}
ready=${VLLM_READY:-$out/vllm_ready}
deadline=${DEADLINE:-$(( $(date +%s) + 600 ))}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1
export VLLM_USE_FLASHINFER_SAMPLER=0  # its sampler compiles kernels on first use; top_p=1 needs none
stamp() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$out/lease.log"; }
job() {  # job NAME LIMIT CMD...: one job, its output in NAME.log, its exit status in lease.log
  local name=$1 limit=$2 now
  shift 2
  now=$(date +%s)
  if [ "$now" -ge "$deadline" ]; then stamp "deadline passed: skipping $name"; return 0; fi
  if (( now + limit > deadline + 60 )); then limit=$(( deadline + 60 - now )); fi
  stamp "start $name (limit ${limit} s)"
  timeout -k 10 "$limit" "$@" > "$out/$name.log" 2>&1
  stamp "end $name rc=$? in $(( $(date +%s) - now )) s"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.csv" 2>&1
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader -lms 500 > "$out/gpu_memory.csv" 2>&1 &
sampler=$!
"$py" -c "import torch, transformers, trl, peft; print(torch.__version__, transformers.__version__, trl.__version__, peft.__version__)" \
  > "$out/versions.txt" 2>&1

sft=(model=shape model.architecture=qwen2_5_1_5b model.dtype=bfloat16 training_loop.device=cuda
  data.task=gsm_symbolic data.train_size=2048 data.eval_size=8 training_loop.grpo.enabled=false
  evaluation.baseline=false evaluation.max_new_tokens=8 training_loop.sft.max_steps=8
  training_loop.sft.save_strategy=no training_loop.sft.packing=true training_loop.sft.padding_free=true
  training_loop.sft.max_length=2048 training_loop.sft.per_device_train_batch_size=8
  training_loop.sft.gradient_accumulation_steps=4 model.attn_implementation=varlen)
rollout=("$py" benchmarks/grpo_rollout.py --backends vllm_colocate --steps 3)

other=(varlen_check mfu_varlen_liger mfu_varlen)
vllm=(vllm_sleep vllm_awake vllm_server)
run_other() {
  case $1 in
    varlen_check) job varlen_check 150 "$py" benchmarks/varlen_check.py --json "$out/varlen_check.json" ;;
    mfu_varlen_liger) job mfu_varlen_liger 240 "$py" run_pipeline.py "${sft[@]}" \
      +training_loop.sft.use_liger_kernel=true "hydra.run.dir=$out/mfu_varlen_liger" ;;
    mfu_varlen) job mfu_varlen 200 "$py" run_pipeline.py "${sft[@]}" "hydra.run.dir=$out/mfu_varlen" ;;
  esac
}
run_vllm() {
  case $1 in
    vllm_sleep) job vllm_sleep 240 "${rollout[@]}" --out "$out/sleep" --json "$out/vllm_sleep.json" \
      training_loop.grpo.vllm_enable_sleep_mode=true ;;
    vllm_awake) job vllm_awake 200 "${rollout[@]}" --out "$out/awake" --json "$out/vllm_awake.json" ;;
    vllm_server)
      local path server
      path=$("$py" -c "from rlvr.model.loader import ShapeModel as S; print(S(architecture='qwen2_5_0_5b', seed=42, dtype='bfloat16', trust_remote_code=False, use_safetensors=True, lora=None, quantization=None, gradient_checkpointing=False).model_path())" 2> "$out/vllm_server_path.log")
      "$py" -m trl.cli.main vllm-serve --model "$path" --gpu-memory-utilization 0.3 --port 8000 \
        > "$out/vllm_server_serve.log" 2>&1 &
      server=$!
      job vllm_server 200 "$py" benchmarks/grpo_rollout.py --backends vllm_server --architecture qwen2_5_0_5b \
        --prompts 4 --generations 8 --tokens 128 --steps 2 --out "$out/server" --json "$out/vllm_server.json"
      kill "$server" 2>/dev/null; sleep 2; kill -9 "$server" 2>/dev/null; pkill -9 -f "vllm.entrypoints" 2>/dev/null
      ;;
  esac
}
# the vLLM jobs go first once vLLM is ready; the others fill the wait
while (( ${#other[@]} + ${#vllm[@]} > 0 )) && [ "$(date +%s)" -lt "$deadline" ]; do
  if [ -f "$ready" ] && (( ${#vllm[@]} > 0 )); then
    run_vllm "${vllm[0]}"; vllm=("${vllm[@]:1}")
  elif (( ${#other[@]} > 0 )); then
    run_other "${other[0]}"; other=("${other[@]:1}")
  else
    sleep 3
  fi
done
for name in "${other[@]}" "${vllm[@]}"; do stamp "not run: $name"; done
kill "$sampler" 2>/dev/null
"$py" benchmarks/grpo_rollout.py --merge "$out/vllm_awake.json" "$out/vllm_sleep.json" > "$out/rollout_table.md" 2>&1
stamp "all done"
