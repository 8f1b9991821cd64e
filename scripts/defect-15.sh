#!/bin/bash
# Issue 22, defect folder 15: the exact Llama-3.1-70B closed-loop concurrency
# search with 2,000 and with 10,000 requests a probe (the plans of
# tests/data/defects/15-closed-loop-warmup/cap-conc-*.yaml, copies of the
# defect folder's), side by side. The answers must agree within 5 % with the
# same verdict for 64 users. About 15 s with a release build on 2 cores.
#   BLIS=target/release/blis-sweep scripts/defect-15.sh
set -euo pipefail
B=${BLIS:-target/release/blis-sweep}
B=$(realpath "$B")
src=$(realpath "$(dirname "$0")/../tests/data/defects/15-closed-loop-warmup")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$src"/cap-conc-*.yaml "$work"/
cd "$work"
for n in 2000 10000; do
    echo "== $n requests a probe"
    "$B" capacity "cap-conc-$n.yaml" -q --no-report
done
