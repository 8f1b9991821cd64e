#!/usr/bin/env bash
# Re-copies the model configs that ship in ../shared into the embedded catalog
# (src/arch/catalog/models/). The other catalog files were taken from the
# public HuggingFace config.json of each model; SOURCES.md there says where.
#     bash scripts/import-model-configs.sh [path/to/shared]
set -euo pipefail
shared=${1:-"$(dirname "$0")/../../shared"}
dest="$(dirname "$0")/../src/arch/catalog/models"
copy() { install -m 644 "$shared/data/$1" "$dest/$2.json"; echo "$2 <- $1"; }
copy blis-vllm-h100/model_configs/Llama-2-7b-hf.json Llama-2-7b
copy blis-vllm-h100/model_configs/Llama-2-70b-hf.json Llama-2-70b
copy blis-vllm-h100/model_configs/CodeLlama-34b-Instruct-hf.json CodeLlama-34b
copy blis-vllm-h100/model_configs/Mixtral-8x7B-v0.1.json Mixtral-8x7B
copy llmservingsim-vllm-bench/profiles/Llama-3.1-8B.config.json Llama-3.1-8B
copy llmservingsim-vllm-bench/profiles/Qwen3-32B.config.json Qwen3-32B
copy llmservingsim-vllm-bench/profiles/Qwen3-30B-A3B-Instruct-2507.config.json Qwen3-30B-A3B
