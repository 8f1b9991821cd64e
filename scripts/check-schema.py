#!/usr/bin/env python3
"""Checks that the outputs of different sweep plans share one schema: each table read with one
DuckDB glob over every folder (no union_by_name, no cast), counts as BIGINT, the deployment as
columns, `request_id` VARCHAR (the id as written) with `request_index` BIGINT beside it in every
plan, and a request-level E2E mean that equals the runs table's.

    python3 scripts/check-schema.py results/quickstart results/agentic results/imported

Used by CI (.ci/run), on three plans with different workloads (single calls, agent DAGs, an
imported Azure trace) and different override keys.
"""
import sys

import duckdb

dirs = sys.argv[1:]
assert len(dirs) >= 2, "give two or more sweep output folders"
con = duckdb.connect()


def glob(table):
    files = ", ".join(f"'{d}/{table}'" for d in dirs)
    return f"read_parquet([{files}])"


for table in ("requests/*.parquet", "nodes/*.parquet", "runs.parquet"):
    schemas = [con.sql(f"DESCRIBE SELECT * FROM read_parquet('{d}/{table}')").fetchall() for d in dirs]
    for d, s in zip(dirs[1:], schemas[1:]):
        assert s == schemas[0], f"{table}: {d} has another schema than {dirs[0]}"
    types = {name: kind for name, kind, *_ in schemas[0]}
    deployment = ("model", "hardware", "tp", "replicas", "dtype", "gpus", "kv_blocks", "latency_model")
    for column in deployment + ("engine_max_num_seqs", "overrides", "plan"):
        assert column in types, f"{table}: no {column} column"
    for column in ("tp", "replicas", "gpus", "kv_blocks", "engine_max_num_seqs", "seed"):
        assert types[column] == "BIGINT", f"{table}: {column} is {types[column]}"
    rows = con.sql(f"SELECT count(*) FROM {glob(table)}").fetchall()[0][0]
    print(f"{table}: one schema of {len(types)} columns across {len(dirs)} plans, {rows} rows")

counts = con.sql(f"DESCRIBE SELECT input_tokens, llm_calls, request_index FROM {glob('requests/*.parquet')}")
counts = counts.fetchall()
assert all(kind == "BIGINT" for _, kind, *_ in counts), counts
for table in ("requests/*.parquet", "nodes/*.parquet"):
    key = dict((n, k) for n, k, *_ in con.sql(f"DESCRIBE SELECT request_id, request_index FROM {glob(table)}").fetchall())
    assert key == {"request_id": "VARCHAR", "request_index": "BIGINT"}, (table, key)
# The ids themselves, read through the one glob, every plan's: the index is the input order and
# the id is unique within a run.
ids = con.sql(f"""
    SELECT plan, count(*) AS requests, count(DISTINCT (run_id, request_id)) AS keys,
           bool_and(request_index >= 0) AS indexed, min(request_id) AS first_id
    FROM {glob('requests/*.parquet')} GROUP BY plan ORDER BY plan""").fetchall()
assert len(ids) == len(dirs), ids
for plan, requests, keys, indexed, first_id in ids:
    assert requests == keys and indexed, (plan, requests, keys, indexed)
    print(f"{plan}: {requests} requests, request_id VARCHAR (e.g. {first_id!r}), request_index BIGINT")
# Requests join their llm calls on (run_id, request_id) across every plan.
joined = con.sql(f"""
    SELECT count(*) FROM {glob('requests/*.parquet')} q JOIN {glob('nodes/*.parquet')} n
    USING (run_id, request_id) WHERE n.request_index <> q.request_index""").fetchall()[0][0]
assert joined == 0, f"{joined} llm calls name another request_index than their request"
runs = con.sql(f"DESCRIBE SELECT completed_requests, total_output_tokens, engine_steps FROM {glob('runs.parquet')}")
assert all(kind == "BIGINT" for _, kind, *_ in runs.fetchall())
# The pool columns are in every plan's tables, pools or not (a plan without `pools:` names its one
# pool `default`; the P/D columns are null there).
pools = dict((n, k) for n, k, *_ in con.sql(f"""DESCRIBE SELECT pool, role, prefill_pool, prefill_replica,
    kv_transfer_s, kv_transfer_bytes FROM {glob('nodes/*.parquet')}""").fetchall())
assert pools == {"pool": "VARCHAR", "role": "VARCHAR", "prefill_pool": "VARCHAR", "prefill_replica": "BIGINT",
                 "kv_transfer_s": "DOUBLE", "kv_transfer_bytes": "BIGINT"}, pools
transfers = con.sql(f"DESCRIBE SELECT kv_transfer_mean_ms, kv_transfer_p99_ms FROM {glob('runs.parquet')}")
assert all(kind == "DOUBLE" for _, kind, *_ in transfers.fetchall())

# One row per request: avg(e2e_s) over `requests` is the runs table's mean E2E, in every plan,
# requests with many llm calls included.
checked = con.sql(f"""
    SELECT r.plan, r.run_id, avg(q.e2e_s) * 1000 AS e2e_mean_ms, r.e2e_mean_ms AS run_e2e_mean_ms,
           max(q.llm_calls) AS most_calls
    FROM {glob('runs.parquet')} r JOIN {glob('requests/*.parquet')} q USING (run_id)
    WHERE q.status = 'completed' GROUP BY ALL""").fetchall()
plans = {plan for plan, *_ in checked}
assert len(plans) == len(dirs), plans
for plan, run_id, mean, run_mean, _ in checked:
    assert abs(mean - run_mean) < 1e-3, (plan, run_id, mean, run_mean)
assert max(calls for *_, calls in checked) > 1, "no plan has requests of several llm calls"
by_plan = con.sql(f"""
    SELECT plan, model, hardware, tp, gpus, kv_blocks, count(DISTINCT run_id) AS runs,
           quantile_cont(ttft_s, 0.99) * 1000 AS ttft_p99_ms
    FROM {glob('nodes/*.parquet')} GROUP BY ALL ORDER BY plan""").fetchall()
print("plan  model  hardware  tp  gpus  kv_blocks  runs  ttft_p99_ms")
for row in by_plan:
    print("  ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row))
print(f"requests x runs: mean E2E equal in {len(checked)} runs of {len(plans)} plans")
