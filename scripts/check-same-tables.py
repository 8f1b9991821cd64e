#!/usr/bin/env python3
"""Checks that two sweep output folders hold the same tables, each read with one DuckDB glob.

    python3 scripts/check-same-tables.py results/quickstart results/quickstart-resumed

Used by CI (.ci/run) after a sweep is interrupted and re-run, and after a Slurm array
(scripts/check-shard-union.py; a sharded sweep's parent folder is read through its shard=I/ folders):
the requests and nodes rows and the runs table (less its wall-time column) must be equal as
multisets, and each glob must read (a part left with another schema would make DuckDB refuse it).
"""
import sys

import duckdb

import os


def glob(folder, table):
    """The table's files in `folder`, or in its shard=I/ folders when it is a sharded sweep's parent."""
    sharded = any(n.startswith("shard=") for n in os.listdir(folder))
    return f"read_parquet('{folder}/{'shard=*/' if sharded else ''}{table}', hive_partitioning=false)"


a, b = sys.argv[1], sys.argv[2]
con = duckdb.connect()
for table, exclude in (("requests/*.parquet", ""), ("nodes/*.parquet", ""), ("runs.parquet", " EXCLUDE (wall_ms)")):
    x = f"(SELECT *{exclude} FROM {glob(a, table)})"
    y = f"(SELECT *{exclude} FROM {glob(b, table)})"
    rows = con.sql(f"SELECT count(*) FROM {x}").fetchall()[0][0]
    for left, right in ((x, y), (y, x)):
        diff = con.sql(f"SELECT count(*) FROM ({left} EXCEPT ALL {right})").fetchall()[0][0]
        assert diff == 0, f"{table}: {diff} rows of one folder are not in the other"
    print(f"{table}: {rows} rows, equal in {a} and {b}")
