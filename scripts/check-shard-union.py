#!/usr/bin/env python3
"""Checks that a sharded sweep's parent folder holds the same sweep as one machine's output folder.

    python3 scripts/check-shard-union.py results/sharded results/whole

Every file of the whole sweep but those carrying wall time (timing.json, manifest.json,
runs.parquet), the report and the folders' own dot files must be in exactly one shard=I/ folder
with the same bytes (each run's Parquet parts, metrics.json, status.json), and the shards must hold nothing else but shards.json; then
scripts/check-same-tables.py compares the tables, each read with one DuckDB glob over the shards.
Used by CI after the Slurm array (scripts/slurm/ci.sh).
"""
import os
import subprocess
import sys

SKIP = {"timing.json", "manifest.json", "runs.parquet", "report.html"}


def files(root):
    out = {}
    for d, _, names in os.walk(root):
        for name in names:
            if name in SKIP or name.startswith("."):  # the folder's identity and lock
                continue
            path = os.path.join(d, name)
            rel = os.path.relpath(path, root).split(os.sep)
            key = "/".join(p for p in rel if not p.startswith("shard="))
            if key in out:
                sys.exit(f"{path}: in two shards")
            out[key] = path
    return out


sharded, whole = sys.argv[1], sys.argv[2]
a, b = files(sharded), files(whole)
assert a.pop("shards.json", None), f"{sharded}/shards.json: missing"
missing, extra = sorted(set(b) - set(a)), sorted(set(a) - set(b))
assert not missing, f"not in any shard: {missing[:5]}"
assert not extra, f"in a shard, not in the whole sweep: {extra[:5]}"
for key, path in b.items():
    with open(path, "rb") as x, open(a[key], "rb") as y:
        assert x.read() == y.read(), f"{a[key]} differs from {path}"
parts = sum(1 for k in b if k.endswith(".parquet"))
print(f"{sharded}: {len(b)} files ({parts} Parquet parts) byte-identical to {whole}'s")
# The tables read with one DuckDB glob each, runs.parquet included (less wall_ms).
here = os.path.dirname(os.path.abspath(__file__))
subprocess.run([sys.executable, os.path.join(here, "check-same-tables.py"), sharded, whole], check=True)
