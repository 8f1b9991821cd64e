#!/usr/bin/env bash
# CI step for `observe` against a real server (.ci/run): install (scripts/vllm-cpu-server/
# setup.sh), start vLLM on 127.0.0.1:$PORT, run smoke.py and prefix_probe.py, then the
# observe → replay → calibrate → fit → predict loop (scripts/observe-loop.sh), and stop the
# server (always, on any exit). Each step gets what is left of one time budget; the first
# failure prints "observe-ci: FAILED at STEP after Ns (budget Bs): WHY" plus the log's tail
# and exits 1. What each step printed is in the log; the loop's figures are printed at the end.
#
# Environment (all optional):
#   BUDGET_S=900   whole-step budget in seconds. Measured on the 2-core box: setup from an
#                  empty uv cache 51-89 s, start 17-45 s, smoke ~9 s (scripts/vllm-cpu-server/
#                  README.md); 900 s leaves room for a loaded machine.
#   PORT=8000  STATE_DIR=/tmp/observe-ci  VENV  MODEL_DIR   passed to the server scripts
#   BIN=target/debug/blis-sweep  OUT=target/observe-loop   passed to scripts/observe-loop.sh
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRV="$HERE/vllm-cpu-server"
BUDGET_S="${BUDGET_S:-900}"
export PORT="${PORT:-8000}"
export STATE_DIR="${STATE_DIR:-/tmp/observe-ci}"
export VENV="${VENV:-/tmp/observe-server/venv}"
export MODEL_DIR="${MODEL_DIR:-/tmp/observe-server/tiny-model}"
BASE="http://127.0.0.1:$PORT"
mkdir -p "$STATE_DIR"
LOG="$STATE_DIR/observe-ci.log"
: >"$LOG"
T0=$SECONDS
started=0

fail() {
  echo "observe-ci: FAILED at $1 after $((SECONDS - T0))s (budget ${BUDGET_S}s): $2" >&2
  echo "--- last lines of $LOG ---" >&2
  tail -25 "$LOG" >&2
  if [ -s "$STATE_DIR/server.log" ]; then
    echo "--- last lines of $STATE_DIR/server.log ---" >&2
    tail -15 "$STATE_DIR/server.log" >&2
  fi
  exit 1
}
cleanup() {
  if [ "$started" = 1 ]; then bash "$SRV/stop.sh" >>"$LOG" 2>&1 || true; fi
}
trap cleanup EXIT

# Runs step NAME with what is left of the budget; a timeout is a failure too.
step() {
  local name="$1"
  shift
  local left=$((BUDGET_S - (SECONDS - T0)))
  [ "$left" -gt 0 ] || fail "$name" "no time left"
  local t=$SECONDS rc=0
  echo "== $name (${left}s left)" >>"$LOG"
  timeout "$left" "$@" >>"$LOG" 2>&1 || rc=$?
  [ "$rc" = 124 ] && fail "$name" "timed out (the budget ran out)"
  [ "$rc" = 0 ] || fail "$name" "exit status $rc"
  echo "observe-ci: $name ok in $((SECONDS - t))s"
}

# Never take over a server someone else runs on this port.
if curl -sf "$BASE/health" >/dev/null 2>&1; then
  fail "start" "a server already answers on $BASE; set PORT to a free port"
fi
step setup bash "$SRV/setup.sh"
started=1
step start env START_TIMEOUT=$((BUDGET_S - (SECONDS - T0))) bash "$SRV/start.sh"
step smoke "$VENV/bin/python" "$SRV/smoke.py" --base "$BASE"
step prefix-probe "$VENV/bin/python" "$SRV/prefix_probe.py" --base "$BASE"
step observe-loop env BASE="$BASE" bash "$HERE/observe-loop.sh"
# The loop's own figures: each observation, its check and replay, the fit and the prediction.
sed -n '/^== observe-loop/,$p' "$LOG"
echo "observe-ci: all steps passed in $((SECONDS - T0))s (log: $LOG)"
