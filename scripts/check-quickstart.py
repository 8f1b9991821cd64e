#!/usr/bin/env python3
"""Queries the quickstart sweep's Parquet output with DuckDB, as a user would, and checks it.

    python3 scripts/check-quickstart.py results/quickstart

Used by CI (.ci/run). Prints the p99 TTFT per concurrency (from the llm calls, `nodes/`) and a
join of runs with requests (`requests/`, one row per request).
"""
import sys

import duckdb

out = sys.argv[1] if len(sys.argv) > 1 else "results/quickstart"
con = duckdb.connect()
requests = f"read_parquet('{out}/**/requests/*.parquet', hive_partitioning=true)"
nodes = f"read_parquet('{out}/**/nodes/*.parquet', hive_partitioning=true)"
runs = f"read_parquet('{out}/**/runs.parquet', hive_partitioning=true)"

p99 = con.sql(f"""
    SELECT coalesce(CAST(concurrency AS VARCHAR), 'open') AS concurrency,
           count(*) AS llm_calls,
           quantile_cont(ttft_s, 0.99) * 1000 AS ttft_p99_ms
    FROM {nodes} GROUP BY ALL ORDER BY min(coalesce(concurrency, 0))""").fetchall()
print("concurrency  llm_calls  ttft_p99_ms")
for c, n, t in p99:
    print(f"{c:>11}  {n:>9}  {t:>11.2f}")
assert len(p99) == 3, p99
assert all(n == 800 and t is not None and t > 0 for _, n, t in p99), p99

joined = con.sql(f"""
    SELECT r.run_id, r.status, r.completed_requests, r.ttft_p99_ms, count(*) AS rows,
           count_if(q.status = 'completed') AS completed_rows, avg(q.e2e_s) * 1000 AS e2e_mean_ms,
           r.e2e_mean_ms AS run_e2e_mean_ms
    FROM {runs} r JOIN {requests} q USING (run_id) GROUP BY ALL ORDER BY r.run_id""").fetchall()
assert len(joined) == 12, joined
for run_id, status, completed, ttft_p99, rows, completed_rows, e2e_mean, run_e2e_mean in joined:
    assert status == "ok" and completed == 200 and rows == 200 and completed_rows == 200, (run_id, status, rows)
    assert ttft_p99 is not None and ttft_p99 > 0
    # The runs table's mean E2E is the mean over the requests table (to the histogram's 1 µs).
    assert abs(e2e_mean - run_e2e_mean) < 1e-3, (run_id, e2e_mean, run_e2e_mean)
print(f"runs x requests join: {len(joined)} runs, {sum(r[4] for r in joined)} rows, all ok")
