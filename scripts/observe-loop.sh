#!/usr/bin/env bash
# The observe → replay → calibrate → fit → predict loop against a running vLLM
# server (the reference CPU server of scripts/vllm-cpu-server/; CI runs it
# through scripts/observe-ci.sh). Three workloads are observed — open-loop chat
# at 1 and 6 requests a second and agent DAGs with shared prefixes — and each
# checked against what it sent (scripts/check-observe.py: token counts, the
# prefix cache's hits). The simulator then replays each observed TraceV2
# pair and `calibrate` compares it with the real run; a linear step model is
# fitted to the two chat runs (`fit`), and predicts the agent run, which it was
# not fitted on: |mean E2E| and |mean ITL| error ≤ 10 % (TTFT reported).
#
# Environment: BASE (http://127.0.0.1:8000), BIN (target/debug/blis-sweep),
# OUT (target/observe-loop), PYTHON (python3).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE="${BASE:-http://127.0.0.1:8000}"
BIN="${BIN:-target/debug/blis-sweep}"
OUT="${OUT:-target/observe-loop}"
PYTHON="${PYTHON:-python3}"
SC=sweeps/scenarios/vllm-cpu
# The tiny model's vocabulary (make_model.py) and the server's KV block
# (start.sh): the generator draws ids for a 32,000-token vocabulary.
VOCAB=8192
BLOCK=32
rm -rf "$OUT"
mkdir -p "$OUT/runs"
cp "$SC/tiny-config.json" "$SC/tiny-linear.yaml" "$OUT/runs/"

# A fresh server's first requests are slow (measured: the first 40 chat
# requests' mean TTFT 68 ms against 23 ms once warm): warm it with a few
# chat requests, recorded apart and not checked.
"$BIN" generate --preset chatbot --rate 4 --num-requests 12 --seed 99 -o "$OUT/warmup.workload.jsonl"
"$BIN" observe --server-url "$BASE" --model tiny "$OUT/warmup.workload.jsonl" -o "$OUT/warmup.jsonl" -q

# The agent run between the two it is predicted from: a machine whose speed
# drifts (a shared VM) drifts across all three alike.
for w in chat-1rps:1 agent:3 chat-6rps:2; do
  name=${w%%:*}
  seed=${w##*:}
  run="$OUT/runs/$name"
  "$BIN" generate --spec "sweeps/workloads/vllm-cpu-$name.yaml" --seed "$seed" -o "$run.workload.jsonl"
  "$BIN" observe --server-url "$BASE" --model tiny "$run.workload.jsonl" -o "$run.baseline.jsonl" \
    --trace-output "$OUT/$name.trace" --metrics-csv "$OUT/$name.metrics.csv" --vocab-size "$VOCAB"
  "$PYTHON" scripts/check-observe.py "$run.workload.jsonl" "$run.baseline.jsonl" "$OUT/$name.trace" \
    "$OUT/$name.metrics.csv" --vocab-size "$VOCAB" --block-size "$BLOCK"
  cp "$SC/tiny.yaml" "$run.scenario.yaml"
  # Replay: the observed TraceV2 pair, read by the simulator's importer,
  # against the real run (the shipped constants, fitted on this server).
  "$BIN" run --scenario "$SC/tiny.yaml" --trace-header "$OUT/$name.trace.yaml" --trace-data "$OUT/$name.trace.csv" \
    -o "$OUT/$name.replay.jsonl" --metrics "$OUT/$name.replay-metrics.json"
  "$BIN" calibrate --trace-header "$OUT/$name.trace.yaml" --trace-data "$OUT/$name.trace.csv" \
    --sim "$OUT/$name.replay.jsonl" --report "$OUT/$name.replay-calibration.json" | sed -n '/^ttft\|^e2e\|^itl/p'
done

# Fit on the two chat loads; predict the agent workload.
"$BIN" fit --runs "$OUT/runs" --experiment chat-1rps --experiment chat-6rps \
  --params step_us,prefill_token_us,decode_token_us,decode_context_token_us,request_overhead_us \
  --score e2e_mean,itl_mean,ttft_mean \
  --max-evaluations 300 --out "$OUT/runs/fitted.yaml"
sed 's|constants_file: tiny-linear.yaml|constants_file: fitted.yaml|' "$SC/tiny.yaml" >"$OUT/runs/predict.yaml"
"$BIN" run --scenario "$OUT/runs/predict.yaml" "$OUT/runs/agent.workload.jsonl" -o "$OUT/agent.predicted.jsonl" \
  --metrics "$OUT/agent.predicted-metrics.json"
"$BIN" calibrate --real "$OUT/runs/agent.baseline.jsonl" --sim "$OUT/agent.predicted.jsonl" \
  --report "$OUT/agent.prediction.json"
"$PYTHON" scripts/check-observe-fit.py "$OUT/agent.prediction.json" 0.10
