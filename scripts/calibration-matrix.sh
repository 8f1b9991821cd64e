#!/usr/bin/env bash
# Replays every real vLLM run in ../shared/data through the simulator and prints
# a markdown table of errors (simulated vs real), one row per run:
#     cargo build --release && bash scripts/calibration-matrix.sh [path/to/shared] [out-dir]
# Uses the product's own commands: convert -> run -> calibrate.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${1:-"$root/../shared"}
out=${2:-"$root/results/calibration"}
bin="$root/target/release/blis-sweep"
"$bin" convert blis-vllm-h100 --data "$shared/data/blis-vllm-h100" --out "$out" 2>/dev/null
"$bin" convert llmservingsim --data "$shared/data/llmservingsim-vllm-bench" --out "$out" 2>/dev/null
for scenario in "$out"/*.scenario.yaml; do
  run=${scenario%.scenario.yaml}
  "$bin" run -q -s "$scenario" "$run.workload.jsonl" -o "$run.sim.jsonl" --metrics "$run.metrics.json"
  "$bin" calibrate --real "$run.baseline.jsonl" --sim "$run.sim.jsonl" --report "$run.report.json" 2>/dev/null
done
python3 - "$out" <<'PY'
import glob, json, sys
print("| run | TTFT mean | TTFT p99 | ITL mean | E2E mean | E2E per-request MAPE |")
print("|---|---|---|---|---|---|")
for f in sorted(glob.glob(sys.argv[1] + "/*.report.json")):
    m = json.load(open(f))["metrics"]
    err = lambda k, s: m[k]["workload_level"][f"sim_{s}"] / m[k]["workload_level"][f"real_{s}"] - 1
    name = f.split("/")[-1][: -len(".report.json")]
    print(f"| {name} | {err('ttft', 'mean'):+.1%} | {err('ttft', 'p99'):+.1%} | {err('itl', 'mean'):+.1%} "
          f"| {err('e2e', 'mean'):+.1%} | {m['e2e']['request_level']['mape']:.1%} |")
PY
