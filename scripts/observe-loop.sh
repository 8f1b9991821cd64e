#!/usr/bin/env bash
# The observe → replay → calibrate → fit → predict loop against a running vLLM
# server (the reference CPU server of scripts/vllm-cpu-server/; CI runs it
# through scripts/observe-ci.sh). Three workloads are observed — open-loop chat
# at 1 and 4 requests a second and agent DAGs with shared prefixes — and each
# checked against what it sent (scripts/check-observe.py: token counts, the
# prefix cache's hits). The simulator then replays each observed TraceV2
# pair and `calibrate` compares it with the real run; a linear step model is
# fitted to the two chat runs (`fit`), and predicts the agent run, which it was
# not fitted on: |mean E2E| and |mean ITL| error ≤ 10 % (TTFT reported).
#
# A round is those three observations, the fit and the prediction. The server
# shares a 2-core VM with the client, and its speed drifts between runs taken
# minutes apart (another tenant's load): measured, one round in three missed
# 10 % on ITL (README, Observing a real server). So up to ROUNDS rounds (3)
# are run, each printed; every check of every round must hold, and the
# prediction must meet 10 % in one round.
#
# Environment: BASE (http://127.0.0.1:8000), BIN (target/debug/blis-sweep),
# OUT (target/observe-loop), PYTHON (python3), ROUNDS (3).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE="${BASE:-http://127.0.0.1:8000}"
BIN="${BIN:-target/debug/blis-sweep}"
OUT="${OUT:-target/observe-loop}"
PYTHON="${PYTHON:-python3}"
ROUNDS="${ROUNDS:-3}"
SC=sweeps/scenarios/vllm-cpu
# The tiny model's vocabulary (make_model.py) and the server's KV block
# (start.sh): the generator draws ids for a 32,000-token vocabulary.
VOCAB=8192
BLOCK=32
rm -rf "$OUT"
mkdir -p "$OUT"

# A fresh server's first requests are slow (measured: the first 40 chat
# requests' mean TTFT 68 ms against 23 ms once warm): warm it with a few
# chat requests, recorded apart and not checked.
"$BIN" generate --preset chatbot --rate 4 --num-requests 12 --seed 99 -o "$OUT/warmup.workload.jsonl"
"$BIN" observe --server-url "$BASE" --model tiny "$OUT/warmup.workload.jsonl" -o "$OUT/warmup.jsonl" -q

# One round, in $R: observe, check, replay and calibrate each workload; fit
# on the chat runs; predict the agent run. Run in a subshell with `set -e`:
# a prediction that misses exits 3 (check-observe-fit.py), and moves on to the
# next round; any other failure stops the loop with its status.
round() {
  R="$OUT/round$1"
  mkdir -p "$R/runs"
  cp "$SC/tiny-config.json" "$SC/tiny-linear.yaml" "$R/runs/"
  # The agent run between the two it is predicted from: a machine whose speed
  # drifts (a shared VM) drifts across all three alike.
  for w in chat-1rps:1 agent:3 chat-4rps:2; do
    name=${w%%:*}
    seed=${w##*:}
    run="$R/runs/$name"
    "$BIN" generate --spec "sweeps/workloads/vllm-cpu-$name.yaml" --seed "$seed" -o "$run.workload.jsonl"
    "$BIN" observe --server-url "$BASE" --model tiny "$run.workload.jsonl" -o "$run.baseline.jsonl" \
      --trace-output "$R/$name.trace" --metrics-csv "$R/$name.metrics.csv" --vocab-size "$VOCAB"
    "$PYTHON" scripts/check-observe.py "$run.workload.jsonl" "$run.baseline.jsonl" "$R/$name.trace" \
      "$R/$name.metrics.csv" --vocab-size "$VOCAB" --block-size "$BLOCK"
    cp "$SC/tiny.yaml" "$run.scenario.yaml"
    # Replay: the observed TraceV2 pair, read by the simulator's importer,
    # against the real run (the shipped constants, fitted on this server).
    "$BIN" run --scenario "$SC/tiny.yaml" --trace-header "$R/$name.trace.yaml" --trace-data "$R/$name.trace.csv" \
      -o "$R/$name.replay.jsonl" --metrics "$R/$name.replay-metrics.json"
    "$BIN" calibrate --trace-header "$R/$name.trace.yaml" --trace-data "$R/$name.trace.csv" \
      --sim "$R/$name.replay.jsonl" --report "$R/$name.replay-calibration.json" | sed -n '/^ttft\|^e2e\|^itl/p'
  done

  # Fit on the two chat loads; predict the agent workload.
  "$BIN" fit --runs "$R/runs" --experiment chat-1rps --experiment chat-4rps \
    --params step_us,prefill_token_us,decode_token_us,decode_context_token_us,request_overhead_us \
    --score e2e_mean,itl_mean,ttft_mean \
    --max-evaluations 300 --out "$R/runs/fitted.yaml"
  sed 's|constants_file: tiny-linear.yaml|constants_file: fitted.yaml|' "$SC/tiny.yaml" >"$R/runs/predict.yaml"
  "$BIN" run --scenario "$R/runs/predict.yaml" "$R/runs/agent.workload.jsonl" -o "$R/agent.predicted.jsonl" \
    --metrics "$R/agent.predicted-metrics.json"
  "$BIN" calibrate --real "$R/runs/agent.baseline.jsonl" --sim "$R/agent.predicted.jsonl" \
    --report "$R/agent.prediction.json"
  "$PYTHON" scripts/check-observe-fit.py "$R/agent.prediction.json" 0.10
}

for n in $(seq 1 "$ROUNDS"); do
  echo "== round $n of at most $ROUNDS"
  rc=0
  (set -e; round "$n") || rc=$?
  if [ "$rc" = 0 ]; then
    echo "observe-loop: the prediction met 10 % in round $n"
    exit 0
  elif [ "$rc" != 3 ]; then
    echo "observe-loop: round $n failed (exit status $rc)" >&2
    exit "$rc"
  fi
done
echo "observe-loop: the prediction missed 10 % in all $ROUNDS rounds" >&2
exit 1
