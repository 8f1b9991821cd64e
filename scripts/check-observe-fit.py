#!/usr/bin/env python3
"""Checks a prediction of a real run (a `blis-sweep calibrate` report, times in µs):

    python3 scripts/check-observe-fit.py REPORT.json [LIMIT]

|error| of mean E2E and of mean ITL ≤ LIMIT (default 0.10); mean TTFT is printed, not checked.
Exits 3 when the prediction misses (a status of its own, so scripts/observe-loop.sh can tell a miss,
which it re-measures, from a failure).
Used by scripts/observe-loop.sh after fitting on two observed loads and predicting a third.
"""
import json
import sys

report = json.load(open(sys.argv[1]))
limit = float(sys.argv[2]) if len(sys.argv) > 2 else 0.10
failed = []
for metric in ("e2e", "itl", "ttft"):
    w = report["metrics"][metric]["workload_level"]
    err = w["sim_mean"] / w["real_mean"] - 1
    checked = metric != "ttft"
    ok = abs(err) <= limit or not checked
    print(
        f"predicted {metric} mean {w['sim_mean'] / 1e3:.1f} ms, real {w['real_mean'] / 1e3:.1f} ms: {err:+.1%}"
        + ("" if checked else " (reported)")
        + ("" if ok else f" — beyond ±{limit:.0%}")
    )
    if not ok:
        failed.append(metric)
sys.exit(3 if failed else 0)
