#!/usr/bin/env bash
# Leave-one-model-out on H100: for each model with real runs in
# ../shared/data/blis-vllm-h100 (the per-request runs and the training runs
# known by their aggregates), fit the kernels model's H100 constants on every
# other model's runs, then replay that model's runs with them. Prints one line
# per held-out run (whole-run errors, sim / real − 1) and writes the constants
# of each fold to OUT/fit-without-<model>.yaml, then how many held-out runs
# are within 5 % on mean E2E and ITL. PARAMS picks the constants (default:
# the three the README's table fits, every kernel time as measured; adding
# gemm_scale,attention_scale lets the scales move, which a fold without an
# MHA model cannot pin down). EXTRA_START adds YAML lines to every fold's
# starting constants (a constant to try, e.g. EXTRA_START='per_layer_us: 5'
# with PARAMS naming it).
#     cargo build --release && bash scripts/lomo.sh [path/to/shared] [OUT]
# About 2 minutes a fold on 2 cores. The binary is copied first, so a
# rebuild while it runs does not change the folds still to come.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${1:-"$root/../shared"}
out=${2:-"$root/results/lomo"}
data="$shared/data/blis-vllm-h100"
mkdir -p "$out"
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
bin="$runs/blis-sweep"
cp "$root/target/release/blis-sweep" "$bin"
"$bin" convert blis-vllm-h100 --data "$data" --out "$runs" 2>/dev/null
# Every fold starts from the measured kernel times (scales 1) and the
# shipped CPU-side constants, never from constants fitted on the held-out model.
start="$out/start.yaml"
printf 'gemm_scale: 1.0\nattention_scale: 1.0\nstep_overhead_us: 160.0\nper_sequence_us: 1.4\nrequest_overhead_us: 8000.0\n' > "$start"
if [ -n "${EXTRA_START:-}" ]; then printf '%s\n' "$EXTRA_START" >> "$start"; fi
params=${PARAMS:-step_overhead_us,per_sequence_us,request_overhead_us}
# model | per-request runs | training runs (the non-overloaded ones)
models=(
  "llama-2-7b|20260217-155451-llama-2-7b-tp1-codegen 20260217-162547-llama-2-7b-tp1-roleplay 20260217-231439-llama-2-7b-tp1-general|67-llama-2-7b-hf-tp1-reasoning-lite-1-1"
  "codellama-34b|20260218-150304-codellama-34b-tp2-general 20260218-150956-codellama-34b-tp2-codegen 20260218-155500-codellama-34b-tp2-roleplay|"
  "llama-3.1-70b||60-llama-3-1-70b-tp4-general-lite-4-1 61-llama-3-1-70b-tp4-codegen-4-1"
  "mistral-nemo-12b||62-mistral-nemo-12b-tp2-general-lite-2-1 63-mistral-nemo-12b-tp1-codegen-1-1"
  "qwen2.5-7b||64-qwen2-5-7b-instruct-tp1-roleplay-1-1 66-qwen2-5-7b-instruct-tp1-reasoning-lite-1-1"
  "yi-34b||65-01-ai-yi-34b-tp2-general-lite-2-1"
)
for held in "${models[@]}"; do
  name=${held%%|*}
  args=()
  for other in "${models[@]}"; do
    [ "$other" = "$held" ] && continue
    rest=${other#*|}
    for r in ${rest%%|*}; do args+=(--experiment "$r"); done
    for r in ${rest#*|}; do args+=(--trainval-experiment "$r"); done
  done
  "$bin" fit --runs "$runs" --trainval "$data" "${args[@]}" --params "$params" --max-evaluations 120 --start "$start" \
    --out "$out/fit-without-$name.yaml" 2>/dev/null
  rest=${held#*|}
  plan="$out/held-out-$name.plan.yaml"
  {
    echo "name: held-out-$name"
    echo "calibration:"
    if [ -n "${rest%%|*}" ]; then
      echo "  - source: blis-vllm-h100"
      echo "    data: $data"
      echo "    experiments: [$(echo ${rest%%|*} | tr ' ' ',')]"
    fi
    if [ -n "${rest#*|}" ]; then
      echo "  - source: blis-trainval"
      echo "    data: $data"
      echo "    experiments: [$(echo ${rest#*|} | tr ' ' ',')]"
    fi
    # The fold's constants; the others as measured (scales 1), not the shipped fit's.
    echo "overrides: {latency_model: {kind: kernels, constants_file: $out/fit-without-$name.yaml}}"
    echo "output: $out/held-out-$name"
  } > "$plan"
  "$bin" -q --no-report "$plan"
  grep '^| [0-9]' "$out/held-out-$name/calibration.md" | sed "s/^/without $name: /" | tee -a "$runs/held-out.md"
done
# Columns: run | deployment | TTFT mean | TTFT p99 | ITL mean | E2E mean | …;
# a cell is "+1.2 %" or, where BLIS published one, "+1.2 % (+3.4 %)".
awk -F'|' '{ itl = $6; e2e = $7; sub(/%.*/, "", itl); sub(/%.*/, "", e2e); n++
  if (itl + 0 <= 5 && itl + 0 >= -5 && e2e + 0 <= 5 && e2e + 0 >= -5) ok++ }
  END { printf "%d of %d held-out runs within 5 %% on mean E2E and ITL\n", ok, n }' "$runs/held-out.md"
