#!/usr/bin/env bash
# Records the vLLM conformance golden traces (see README.md beside this script):
#
#     bash scripts/vllm-conformance/record.sh [path/to/shared]
#
# 1. installs uv with pip if it is missing;
# 2. makes one venv per pinned vLLM, target/vllm-conformance/venv-<version>, with
#    `uv pip install vllm==<version>` (about 9 GB and a minute each; skipped when the
#    venv already has that vllm). VLLM_CONFORMANCE_VENVS=DIR uses DIR/v<version>
#    instead (e.g. VLLM_CONFORMANCE_VENVS=/work/vllm-venvs), installing there only
#    if that venv lacks the version;
# 3. writes the case specs (cases.py) and a model dir holding only Llama-2-7b-hf's
#    config.json from <shared>/data/blis-vllm-h100/model_configs (shared defaults to
#    ../shared beside the repository);
# 4. runs driver.py for every version x {sync, async}, two at a time:
#    tests/data/vllm-conformance/golden/<version>-<mode>.jsonl, then the
#    speculative decoding, LoRA and priority-scheduling cases into
#    tests/data/vllm-conformance/features/golden/<version>-<mode>.jsonl;
# 5. runs driver.py on the hybrid KV cache group cases (full attention + sliding
#    window / chunked local) into
#    tests/data/vllm-conformance/hybrid/golden/<version>-<mode>.jsonl (and
#    <version>-<mode>.groups.jsonl, the blocks each group holds per row), for
#    the versions in VLLM_CONFORMANCE_HYBRID_VERSIONS (default "0.33.0", the
#    only release recorded) that this run installed.
# CPU only: no GPU, weights, tokenizer or network beyond the installs.
# VLLM_CONFORMANCE_VERSIONS="0.19.0 0.33.0" records a subset.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/scripts/vllm-conformance"
shared=${1:-${VLLM_CONFORMANCE_SHARED:-"$root/../shared"}}
versions=${VLLM_CONFORMANCE_VERSIONS:-"0.15.1 0.19.0 0.33.0"}
work="$root/target/vllm-conformance"
data="$root/tests/data/vllm-conformance"
mkdir -p "$work/logs"
start=$SECONDS

config="$shared/data/blis-vllm-h100/model_configs/Llama-2-7b-hf.json"
[[ -f $config ]] || { echo "missing $config (pass the shared dir as the argument)" >&2; exit 1; }
mkdir -p "$work/model"
cp "$config" "$work/model/config.json"

if command -v uv >/dev/null 2>&1; then
    uv=(uv)
else
    python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install --quiet uv \
        || python3 -m pip install --quiet --user uv
    uv=(python3 -m uv)
fi

venv_dir() {
    if [[ -n ${VLLM_CONFORMANCE_VENVS:-} ]]; then
        echo "$VLLM_CONFORMANCE_VENVS/v$1"
    else
        echo "$work/venv-$1"
    fi
}

installed_vllm() {  # the vllm version in venv $1, or nothing
    [[ -x $1/bin/python ]] || return 0
    "$1/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm"))' 2>/dev/null || true
}

for v in $versions; do
    dir=$(venv_dir "$v")
    have=$(installed_vllm "$dir")
    if [[ $have == "$v" ]]; then
        echo "vllm $v: $dir"
        continue
    fi
    echo "vllm $v: installing into $dir"
    [[ -x $dir/bin/python ]] || "${uv[@]}" venv --quiet -p 3.11 "$dir"
    "${uv[@]}" pip install --quiet -p "$dir/bin/python" "vllm==$v"
    have=$(installed_vllm "$dir")
    [[ $have == "$v" ]] || { echo "vllm $v: install failed ($dir has '$have')" >&2; exit 1; }
done

python3 "$here/cases.py"

export VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 PYTHONHASHSEED=0
failed=0
for v in $versions; do
    dir=$(venv_dir "$v")
    pids=()
    for mode in sync async; do
        log="$work/logs/$v-$mode.log"
        # the base cases, then the feature cases (speculative, LoRA, priority: features/)
        { "$dir/bin/python" "$here/driver.py" --mode "$mode" --model "$work/model" \
            && "$dir/bin/python" "$here/driver.py" --mode "$mode" --model "$work/model" \
                --cases "$data/features/cases" --out "$data/features/golden"; } >"$log" 2>&1 &
        pids+=("$!")
    done
    for i in 0 1; do
        mode=$([[ $i == 0 ]] && echo sync || echo async)
        if wait "${pids[$i]}"; then
            grep "^wrote" "$work/logs/$v-$mode.log"
        else
            echo "vllm $v $mode failed; see $work/logs/$v-$mode.log:" >&2
            tail -n 20 "$work/logs/$v-$mode.log" >&2
            failed=1
        fi
    done
done

# 5. hybrid KV cache groups (hybrid/): only the releases recorded so far.
hybrid_versions=${VLLM_CONFORMANCE_HYBRID_VERSIONS:-"0.33.0"}
for v in $versions; do
    [[ " $hybrid_versions " == *" $v "* ]] || continue
    dir=$(venv_dir "$v")
    pids=()
    for mode in sync async; do
        "$dir/bin/python" "$here/driver.py" --mode "$mode" --model "$work/model" \
            --cases "$data/hybrid/cases" --out "$data/hybrid/golden" \
            >"$work/logs/$v-$mode-hybrid.log" 2>&1 &
        pids+=("$!")
    done
    for i in 0 1; do
        mode=$([[ $i == 0 ]] && echo sync || echo async)
        log="$work/logs/$v-$mode-hybrid.log"
        if wait "${pids[$i]}"; then
            grep "^wrote" "$log"
        else
            echo "vllm $v $mode (hybrid) failed; see $log:" >&2
            tail -n 20 "$log" >&2
            failed=1
        fi
    done
done
echo "done in $((SECONDS - start)) s (per-case summaries in $work/logs/)"
exit $failed
