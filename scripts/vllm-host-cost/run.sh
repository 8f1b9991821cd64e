#!/usr/bin/env bash
# Measures vLLM's CPU side per engine step (see README.md beside this script):
#
#     bash scripts/vllm-host-cost/run.sh [path/to/shared]
#
# 1. installs uv with pip if it is missing;
# 2. makes one venv per vLLM version with `uv pip install vllm==<version>` (about
#    9 GB and a minute each), target/vllm-host-cost/venv-<version>, or
#    DIR/v<version> with VLLM_HOST_COST_VENVS=DIR (e.g. /work/vllm-venvs, the
#    same layout as scripts/vllm-conformance's VLLM_CONFORMANCE_VENVS);
# 3. runs measure.py per version, one at a time (the timings want the CPU to
#    themselves): scripts/vllm-host-cost/curves/vllm-<version>.csv;
# 4. fits the host terms of every curve (fit.py): curves/terms.csv, printed.
# CPU only: no GPU, weights or network beyond the installs. The model dir holds
# only Llama-2-7b-hf's config.json from <shared>/data/blis-vllm-h100/model_configs.
# VLLM_HOST_COST_VERSIONS="0.15.1" measures a subset; extra arguments to
# measure.py go in VLLM_HOST_COST_ARGS (e.g. "--reps 50");
# VLLM_HOST_COST_OUT=DIR writes the curves there instead of curves/.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/scripts/vllm-host-cost"
shared=${1:-"$root/../shared"}
versions=${VLLM_HOST_COST_VERSIONS:-"0.15.1 0.12.0"}
work="$root/target/vllm-host-cost"
curves=${VLLM_HOST_COST_OUT:-"$here/curves"}
mkdir -p "$work/model" "$curves"

config="$shared/data/blis-vllm-h100/model_configs/Llama-2-7b-hf.json"
[[ -f $config ]] || { echo "missing $config (pass the shared dir as the argument)" >&2; exit 1; }
cp "$config" "$work/model/config.json"

if command -v uv >/dev/null 2>&1; then
    uv=(uv)
else
    python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install --quiet uv \
        || python3 -m pip install --quiet --user uv
    uv=(python3 -m uv)
fi

venv_dir() {
    if [[ -n ${VLLM_HOST_COST_VENVS:-} ]]; then echo "$VLLM_HOST_COST_VENVS/v$1"; else echo "$work/venv-$1"; fi
}

installed_vllm() {  # the vllm version in venv $1, or nothing
    [[ -x $1/bin/python ]] || return 0
    "$1/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm"))' 2>/dev/null || true
}

export VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 PYTHONHASHSEED=0
for v in $versions; do
    dir=$(venv_dir "$v")
    if [[ $(installed_vllm "$dir") != "$v" ]]; then
        echo "vllm $v: installing into $dir"
        [[ -x $dir/bin/python ]] || "${uv[@]}" venv --quiet -p 3.11 "$dir"
        "${uv[@]}" pip install --quiet -p "$dir/bin/python" "vllm==$v"
        [[ $(installed_vllm "$dir") == "$v" ]] || { echo "vllm $v: install failed in $dir" >&2; exit 1; }
    fi
    echo "vllm $v: measuring with $dir"
    # shellcheck disable=SC2086
    "$dir/bin/python" "$here/measure.py" --model "$work/model" \
        --tokenizer-cache "$work/tokenizer.json" --out "$curves/vllm-$v.csv" \
        ${VLLM_HOST_COST_ARGS:-} 2>&1 | grep -v "Failed to import from vllm._C"
done
{
    lscpu | grep -E "^(Model name|CPU family|Model:|Stepping|CPU\(s\)|Thread|Core|Socket|Hypervisor|L3|BogoMIPS)"
    grep -m1 "cpu MHz" /proc/cpuinfo
    echo "load average while measuring: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$curves/cpu.txt"
python3 "$here/fit.py" "$curves"/vllm-*.csv --out "$curves/terms.csv"
