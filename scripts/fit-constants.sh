#!/usr/bin/env bash
# Fits the per-GPU constants that ship embedded, from the real runs in
# ../shared/data:
# * the kernels model's H100 constants (src/latency/kernels/h100.constants.yaml):
#   the GPU side and the front end on the six non-overloaded runs of
#   blis-vllm-h100 (vLLM 0.15.1, async scheduling: the CPU side hides behind
#   the GPU), then the CPU side's one factor (cpu_scale, on the terms
#   cpu_step_us, cpu_per_sequence_us, cpu_per_token_us that
#   scripts/vllm-host-cost measured on vLLM 0.12.0's own objects: the
#   step_serial row of its curves/terms.csv) on 18 Qwen3-32B rows of
#   aiconfigurator's silicon_sample.csv (vLLM 0.12.0, no async scheduling:
#   the CPU side adds to every step) at TP 2/4/8; and the
#   two held-out fits (one model's runs only) that
#   sweeps/calibration-holdout-*.yaml check against the other model;
# * the roofline's RTX PRO 6000 constants on the two dense llmservingsim runs
#   (src/latency/roofline/rtxpro6000.constants.yaml).
#     cargo build --release && bash scripts/fit-constants.sh [path/to/shared]
# About 2 minutes per fit on 2 cores. The fit starts from the constants the
# binary embeds, so rebuild and rerun until they stop moving.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${1:-"$root/../shared"}
bin="$root/target/release/blis-sweep"
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
"$bin" convert blis-vllm-h100 --data "$shared/data/blis-vllm-h100" --out "$runs" 2>/dev/null
"$bin" convert llmservingsim --data "$shared/data/llmservingsim-vllm-bench" --out "$runs" 2>/dev/null
llama="--experiment 20260217-155451-llama-2-7b-tp1-codegen --experiment 20260217-162547-llama-2-7b-tp1-roleplay --experiment 20260217-231439-llama-2-7b-tp1-general"
codellama="--experiment 20260218-150304-codellama-34b-tp2-general --experiment 20260218-150956-codellama-34b-tp2-codegen --experiment 20260218-155500-codellama-34b-tp2-roleplay"
params="--params step_overhead_us,per_sequence_us,request_overhead_us,gemm_scale,attention_scale --max-evaluations 150"
# shellcheck disable=SC2086
"$bin" fit --runs "$runs" $llama $codellama $params --out "$runs/gpu.yaml"
# The silicon rows by name (GPU-model-tpN-dtype-ISLxOSL-cC-lineL): TP 2/4/8
# x 1024x1024, 1024x128 x concurrency 8/32/128.
silicon=()
rows="H100-Qwen3-32B-tp2-bf16-1024x1024-c128-line1536 H100-Qwen3-32B-tp2-bf16-1024x1024-c32-line1530
  H100-Qwen3-32B-tp2-bf16-1024x1024-c8-line1524 H100-Qwen3-32B-tp2-bf16-1024x128-c128-line1506
  H100-Qwen3-32B-tp2-bf16-1024x128-c32-line1500 H100-Qwen3-32B-tp2-bf16-1024x128-c8-line1494
  H100-Qwen3-32B-tp4-bf16-1024x1024-c128-line1537 H100-Qwen3-32B-tp4-bf16-1024x1024-c32-line1531
  H100-Qwen3-32B-tp4-bf16-1024x1024-c8-line1525 H100-Qwen3-32B-tp4-bf16-1024x128-c128-line1507
  H100-Qwen3-32B-tp4-bf16-1024x128-c32-line1501 H100-Qwen3-32B-tp4-bf16-1024x128-c8-line1495
  H100-Qwen3-32B-tp8-bf16-1024x1024-c128-line1538 H100-Qwen3-32B-tp8-bf16-1024x1024-c32-line1532
  H100-Qwen3-32B-tp8-bf16-1024x1024-c8-line1526 H100-Qwen3-32B-tp8-bf16-1024x128-c128-line1508
  H100-Qwen3-32B-tp8-bf16-1024x128-c32-line1502 H100-Qwen3-32B-tp8-bf16-1024x128-c8-line1496"
for row in $rows; do silicon+=(--silicon-row "$row"); done
# The measured CPU terms replace the start's; only their scale is fitted.
read -r step per_seq per_token < <(awk -F, '$1 == "0.12.0" && $2 == "step_serial" { print $3, $4, $5 }' \
  "$root/scripts/vllm-host-cost/curves/terms.csv")
[[ -n ${per_token:-} ]] || { echo "no 0.12.0 step_serial terms in scripts/vllm-host-cost/curves/terms.csv" >&2; exit 1; }
sed -i -E -e "s/^cpu_step_us: .*/cpu_step_us: $step/" -e "s/^cpu_per_sequence_us: .*/cpu_per_sequence_us: $per_seq/" \
  -e "s/^cpu_per_token_us: .*/cpu_per_token_us: $per_token/" "$runs/gpu.yaml"
"$bin" fit --silicon "$shared/data/aiconfigurator-vllm-h100-h200" "${silicon[@]}" \
  --params cpu_scale --start "$runs/gpu.yaml" --out "$runs/cpu.yaml"
# One file: both fits' provenance, the second's constants (it kept the first's).
{
    grep '^#' "$runs/gpu.yaml"
    echo "# The CPU side's terms (cpu_step_us, cpu_per_sequence_us, cpu_per_token_us) are measured, not fitted:"
    echo "# vLLM 0.12.0's own objects timed on the CPU by scripts/vllm-host-cost (the step_serial row of its"
    echo "# curves/terms.csv: schedule + update_from_output + the step's broadcast + the worker's input"
    echo "# preparation, thread CPU time on a 2.6 GHz Xeon under KVM, curves/cpu.txt); only their scale is:"
    cat "$runs/cpu.yaml"
} > "$root/src/latency/kernels/h100.constants.yaml"
# shellcheck disable=SC2086
"$bin" fit --runs "$runs" $llama $params --out "$root/sweeps/calibration/h100-fit-llama-2-7b.yaml"
# shellcheck disable=SC2086
"$bin" fit --runs "$runs" $codellama $params --out "$root/sweeps/calibration/h100-fit-codellama-34b.yaml"
"$bin" fit --runs "$runs" --experiment RTXPRO6000__Llama-3.1-8B --experiment RTXPRO6000__Qwen3-32B \
  --params memory_efficiency,decode_attention_efficiency,step_overhead_us,allreduce_floor_us,allreduce_efficiency \
  --max-evaluations 200 --out "$root/src/latency/roofline/rtxpro6000.constants.yaml"
