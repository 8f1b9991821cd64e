#!/usr/bin/env bash
# Interactive (critical) and batch traffic sharing 4 replicas of Llama-3.1-8B
# on H100, at 1x, 1.5x and 2x the deployment's capacity, under FCFS engines,
# vLLM priority scheduling, and gateway flow control: critical TTFT p99 and
# goodput per class, from the result JSONL (README "Admission and flow
# control"). Good: completed with TTFT <= TTFT_SLO_S (1 s); goodput: good
# requests per simulated second (the run, drain included). Usage: BLIS=target/release/blis-sweep scripts/gateway-classes.sh [CAPACITY]
# Without CAPACITY it is measured first: the responses/s of an FCFS run at
# 600 req/s (well past saturation).
set -euo pipefail
BLIS=${BLIS:-target/release/blis-sweep}
N=${N:-12000}          # requests a run
TTFT_SLO_S=${TTFT_SLO_S:-1.0}   # a request is good when it completed with TTFT <= this
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
base=sweeps/scenarios/llama-3.1-8b-h100-tp1.yaml
variant() { # name, extra YAML appended to the base scenario
  { grep -v '^name:' "$base"; echo "replicas: 4"; echo "$2"; } > "$dir/$1.yaml"
}
variant fcfs "router: {policy: least-requests}"
variant priority "router: {policy: least-requests}"
sed -i 's/^engine:$/engine:\n  scheduling_policy: priority/' "$dir/priority.yaml"
variant flow "router: {policy: least-requests, flow_control: {}}"
variant flow+shed "router: {policy: least-requests, flow_control: {}, admission: {policy: shed-by-class}}"

workload() { # rate -> $dir/w-RATE.jsonl: every other request critical, the rest batch
  "$BLIS" generate --preset chatbot --rate "$1" --num-requests "$N" --seed 1 -o "$dir/raw.jsonl"
  python3 - "$dir/raw.jsonl" "$dir/w-$1.jsonl" <<'PY'
import json, sys
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as out:
    for i, line in enumerate(f):
        r = json.loads(line)
        r["slo_class"] = "critical" if i % 2 == 0 else "batch"
        out.write(json.dumps(r) + "\n")
PY
}

summarize() { # results, metrics, label
  python3 - "$1" "$2" "$3" "$TTFT_SLO_S" <<'PY'
import json, sys
res, met, label, slo = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
m = json.load(open(met))
dur = m["sim_duration_s"]
stats = {}
for line in open(res):
    r = json.loads(line)
    c = r.get("slo_class", "standard")
    s = stats.setdefault(c, {"n": 0, "done": 0, "good": 0, "ttft": []})
    s["n"] += 1
    node = r["sub_requests"][0]
    if "error" in node:
        continue
    s["done"] += 1
    t = node["token_latency"][0]
    s["ttft"].append(t)
    s["good"] += t <= slo
def p99(xs):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * 0.99
    lo = int(k); hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)
c, b = stats["critical"], stats["batch"]
g = m.get("gateway", {})
gw = f"{g['queue_wait_p99_ms']:,.0f} ms / {g['max_depth']}" if g else "-"
print(f"| {label} | {p99(c['ttft'])*1e3:,.0f} ms | {100*c['good']/c['n']:.1f} % | {c['good']/dur:.1f} | "
      f"{b['good']/dur:.1f} | {b['done']}/{b['n']} | {gw} | {dur:.1f} s |")
PY
}

cap=${1:-}
if [ -z "$cap" ]; then
  workload 600
  "$BLIS" run -q -s "$dir/fcfs.yaml" "$dir/w-600.jsonl" -o /dev/null --metrics "$dir/m.json"
  cap=$(python3 -c "import json; print(round(json.load(open('$dir/m.json'))['responses_per_sec']))")
  echo "capacity (FCFS responses/s at 600 req/s offered): $cap"
fi
echo "| load (req/s) / policy | critical TTFT p99 | critical good | critical goodput | batch goodput | batch completed | gateway wait p99 / max depth | run |"
echo "|---|---|---|---|---|---|---|---|"
for x in 1 1.5 2; do
  rate=$(python3 -c "print(round($cap * $x))")
  workload "$rate"
  for v in fcfs priority flow flow+shed; do
    "$BLIS" run -q -s "$dir/$v.yaml" "$dir/w-$rate.jsonl" -o "$dir/out.jsonl" --metrics "$dir/m.json"
    summarize "$dir/out.jsonl" "$dir/m.json" "${x}x = $rate / $v"
  done
done
