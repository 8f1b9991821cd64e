#!/usr/bin/env python3
"""Fits host terms to the curves measure.py wrote.

    python3 scripts/vllm-host-cost/fit.py curves/vllm-*.csv --out curves/terms.csv

Per vLLM version and per part (and per group of parts, below), a least-squares
fit of the step's median time over every measured (running, context, kind):

    median_us = step_us + per_sequence_us * running
                        + per_token_us * scheduled_tokens
                        + per_finished_us * finished

on the thread-CPU-clock medians (cpu_median_us; --column median_us for the
wall clock), weighted by 1 / median_us (so a 20 µs step counts as much as a 2 ms one: the
fit minimises relative errors). A term that comes out negative is dropped and
the rest refitted. The groups, by where vLLM runs them (see README.md):

  engine_serial  schedule + update + dispatch: the engine core's busy loop
  worker_prepare prepare: the GPU worker's input preparation
  step_serial    engine_serial + worker_prepare: without async scheduling,
                 the host time a step waits for besides the GPU
  frontend       decode + process: the API server process
A group's median is the sum of its parts' medians. Pure Python (no numpy).
"""
import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

TERMS = ("step_us", "per_sequence_us", "per_token_us", "per_finished_us")
GROUPS = {
    "engine_serial": ("schedule", "update", "dispatch"),
    "worker_prepare": ("prepare",),
    "step_serial": ("schedule", "update", "dispatch", "prepare"),
    "frontend": ("decode", "process"),
}


def solve(a, b):
    """Gaussian elimination with partial pivoting: a x = b."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        if abs(m[c][c]) < 1e-12:
            raise ValueError("singular")
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                for k in range(c, n + 1):
                    m[r][k] -= f * m[c][k]
    return [m[i][n] / m[i][i] for i in range(n)]


def wls(xs, ys, cols):
    """Weighted least squares on the columns `cols` (indices into a row of xs)."""
    a = [[0.0] * len(cols) for _ in cols]
    b = [0.0] * len(cols)
    for x, y in zip(xs, ys):
        w = 1.0 / (y * y)
        for i, ci in enumerate(cols):
            b[i] += w * x[ci] * y
            for j, cj in enumerate(cols):
                a[i][j] += w * x[ci] * x[cj]
    return solve(a, b)


def fit(rows):
    """rows: (running, scheduled_tokens, finished, median_us) -> terms, max |rel err|."""
    xs = [(1.0, r, t, f) for r, t, f, _ in rows]
    ys = [y for *_, y in rows]
    cols = [i for i in range(4) if any(x[i] for x in xs)]
    while True:
        coef = wls(xs, ys, cols)
        neg = [c for c, v in zip(cols, coef) if v < 0]
        if not neg:
            break
        cols.remove(neg[0])
    terms = [0.0] * 4
    for c, v in zip(cols, coef):
        terms[c] = v
    errs = [abs(sum(t * xi for t, xi in zip(terms, x)) / y - 1) for x, y in zip(xs, ys)]
    return terms, max(errs), sorted(errs)[len(errs) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("curves", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--column", default="cpu_median_us",
                    help="the curves' column to fit (cpu_median_us or median_us)")
    args = ap.parse_args()

    med = defaultdict(dict)  # (version, running, context, kind, sched, fin) -> part -> us
    for path in args.curves:
        with path.open() as f:
            for r in csv.DictReader(f):
                key = (r["version"], int(r["running"]), int(r["context"]), r["kind"],
                       int(r["scheduled_tokens"]), int(r["finished"]))
                med[key][r["part"]] = float(r[args.column])
    versions = sorted({k[0] for k in med})
    parts = sorted({p for v in med.values() for p in v})
    out = []
    for v in versions:
        keys = [k for k in med if k[0] == v]
        for name, members in [(p, (p,)) for p in parts] + list(GROUPS.items()):
            rows = [(k[1], k[4], k[5], sum(med[k][p] for p in members))
                    for k in keys if all(p in med[k] for p in members)]
            if len(rows) < 8:
                continue
            terms, worst, typical = fit(rows)
            out.append({"version": v, "part": name,
                        **{t: round(x, 3) for t, x in zip(TERMS, terms)},
                        "median_rel_err": round(typical, 3), "max_rel_err": round(worst, 3),
                        "points": len(rows)})
    fields = ["version", "part", *TERMS, "median_rel_err", "max_rel_err", "points"]
    tmp = args.out.with_name(args.out.name + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        w.writerows(out)
    tmp.replace(args.out)
    w = csv.DictWriter(sys.stdout, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows(out)


if __name__ == "__main__":
    main()
