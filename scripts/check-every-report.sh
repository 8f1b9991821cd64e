#!/usr/bin/env bash
# Every example plan (sweeps/*.yaml) run with BIN, then its report opened in
# headless Chromium (scripts/check-report.py): every chart drew marks, the
# page logged no warning or error. The screenshots of the README's three
# reports are written to SHOTS (default target/report-shots/): the README's
# docs/report-*.png are these, taken by this script.
#
#     BIN=target/release/blis-sweep bash scripts/check-every-report.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/blis-sweep}
SHOTS=${SHOTS:-target/report-shots}
mkdir -p "$SHOTS"
# The inputs plans name but the repository does not hold, made as the plans'
# own comments say: the AgentX plan's synthetic Weka corpus.
[ -s target/weka-64.jsonl ] || python3 scripts/weka-synth.py --sessions 64 --seed 1 > target/weka-64.jsonl
for plan in sweeps/*.yaml; do
    name=$(basename "$plan" .yaml)
    out=$(sed -n 's/^output: *//p' "$plan")
    dir=$(realpath -m "sweeps/$out")
    start=$(date +%s)
    # Exit 1 is a sweep whose runs failed on purpose (a plan that shows
    # failures); anything else is an error.
    rc=0
    "$BIN" -q --force "$plan" >"$SHOTS/$name.log" 2>&1 || rc=$?
    if [ "$rc" -gt 1 ]; then
        echo "$plan: exit $rc"; cat "$SHOTS/$name.log"; exit 1
    fi
    python3 scripts/check-report.py "$dir/report.html" - "$SHOTS/$name.png" | sed "s|^ok  |ok  $name ($(( $(date +%s) - start )) s) |"
done
