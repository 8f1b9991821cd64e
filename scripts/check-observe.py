#!/usr/bin/env python3
"""Checks one `blis-sweep observe` of a real vLLM server against the workload it sent:

    python3 scripts/check-observe.py WORKLOAD.jsonl OBSERVED.jsonl TRACE_PREFIX METRICS.csv \
        [--vocab-size N] [--block-size B]

- every request was recorded, completed, and each LLM call's prompt and completion token counts
  (as the result echoes them, from the server's `usage`) equal the workload's, with one latency a
  generated token;
- the TraceV2 data has one row a call, `status` ok, prompt and output counts the workload's;
- the server's prefix-cache counters (the /metrics scrape, last row less first) agree with the
  workload's shared prefixes: queries = the prompt tokens sent, and hits between the hits the
  workload's prompts guarantee and those they allow. A call hits a block of `B` tokens when an
  earlier prompt shares the block and everything before it (vLLM's chained block hashes), never
  its last prompt token (vLLM recomputes it). Guaranteed: shared with a call whose first token came
  back before this call was sent (its prompt blocks were then in the cache; the cache is far larger
  than these workloads, so nothing is evicted). Allowed: shared with any call sent before it.
  Prompts without token ids (text built with the server's tokenizer) share nothing.

Used by CI (scripts/observe-ci.sh). Exits 1 naming each failure.
"""
import argparse
import csv
import json
import sys


def llm_calls(request):
    return [s for s in request["sub_requests"] if s["kind"] == "llm"]


def block_hashes(ids, block):
    """Chained hashes of the full blocks of `ids`, as vLLM keys its prefix cache."""
    out, h = [], None
    for i in range(0, len(ids) - len(ids) % block, block):
        h = hash((h, tuple(ids[i : i + block])))
        out.append(h)
    return out


def hit_tokens(hashes, n_tokens, cached, block):
    hit = 0
    for h in hashes:
        if h not in cached:
            break
        hit += 1
    return min(hit, (n_tokens - 1) // block) * block


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("observed")
    ap.add_argument("trace_prefix")
    ap.add_argument("metrics")
    ap.add_argument("--vocab-size", type=int)
    ap.add_argument("--block-size", type=int, default=16)
    a = ap.parse_args()
    fail = []
    work = {str(r["request_id"]): r for r in map(json.loads, open(a.workload))}
    seen = {}
    for line in open(a.observed):
        r = json.loads(line)
        rid = str(r["request_id"])
        seen[rid] = r
        if rid not in work:
            fail.append(f"{a.observed}: request {rid} is not in the workload")
            continue
        for k, (want, got) in enumerate(zip(llm_calls(work[rid]), llm_calls(r))):
            if "error" in got or got.get("status") not in (None, "ok", "completed"):
                fail.append(f"{a.observed}: request {rid} call {k} failed: {got.get('error', got.get('status'))}")
            for key in ("input_tokens", "output_tokens"):
                if want[key] != got[key]:
                    fail.append(f"{a.observed}: request {rid} call {k} {key} {got[key]} != workload's {want[key]}")
            if len(got.get("token_latency", [])) != want["output_tokens"]:
                fail.append(
                    f"{a.observed}: request {rid} call {k}: {len(got.get('token_latency', []))} token latencies "
                    f"for {want['output_tokens']} output tokens"
                )
    missing = sorted(set(work) - set(seen), key=str)
    if missing:
        fail.append(f"{a.observed}: {len(missing)} requests not recorded (first {missing[0]})")

    # The calls as the server saw them, in the order they were sent.
    rows = list(csv.DictReader(open(a.trace_prefix + ".csv")))
    calls = []
    for row in rows:
        # A DAG's calls are one session: its rows carry the request's id as
        # session_id and their order in it as round_index.
        rid, k = row["session_id"] or row["request_id"], int(row["round_index"])
        want = llm_calls(work[rid])[k] if rid in work and k < len(llm_calls(work[rid])) else None
        if want is None:
            fail.append(f"{a.trace_prefix}.csv: request {rid} round {k} is not a call of the workload")
            continue
        if row["status"] != "ok":
            fail.append(f"{a.trace_prefix}.csv: request {rid} round {k}: status {row['status']}")
        if int(row["server_input_tokens"]) != want["input_tokens"] or int(row["output_tokens"]) != want["output_tokens"]:
            fail.append(f"{a.trace_prefix}.csv: request {rid} round {k}: token counts differ from the workload's")
        ids = want.get("input_token_ids")
        if ids is not None and a.vocab_size:
            ids = [i % a.vocab_size for i in ids]
        calls.append((int(row["send_time_us"]), int(row["first_chunk_time_us"]), want["input_tokens"], ids))
    n_calls = sum(len(llm_calls(r)) for r in work.values())
    if len(calls) != n_calls:
        fail.append(f"{a.trace_prefix}.csv: {len(calls)} rows for the workload's {n_calls} calls")

    calls.sort(key=lambda c: c[0])
    hashes = [block_hashes(c[3], a.block_size) if c[3] is not None else [] for c in calls]
    low = high = queries = 0
    for i, (send, _, n, _) in enumerate(calls):
        queries += n
        allowed = {h for j in range(i) for h in hashes[j]}
        guaranteed = {h for j in range(i) if calls[j][1] <= send for h in hashes[j]}
        high += hit_tokens(hashes[i], n, allowed, a.block_size)
        low += hit_tokens(hashes[i], n, guaranteed, a.block_size)

    m = list(csv.DictReader(open(a.metrics)))
    if len(m) < 2:
        fail.append(f"{a.metrics}: fewer than two scrapes")
    else:
        d = {k: float(m[-1][k]) - float(m[0][k]) for k in ("prefix_cache_queries", "prefix_cache_hits")}
        if d["prefix_cache_queries"] != queries:
            fail.append(f"{a.metrics}: {d['prefix_cache_queries']:.0f} prefix-cache queries, the workload sent {queries} prompt tokens")
        if not low <= d["prefix_cache_hits"] <= high:
            fail.append(
                f"{a.metrics}: {d['prefix_cache_hits']:.0f} prefix-cache hits, the workload's prefixes give {low}–{high}"
            )
        print(
            f"{a.observed}: {len(seen)} requests, {len(calls)} calls with the workload's token counts; "
            f"prefix cache: {d['prefix_cache_queries']:.0f} tokens queried, {d['prefix_cache_hits']:.0f} hit "
            f"(the workload's prefixes: {low}–{high})"
        )
    for f in fail[:20]:
        print("FAIL", f, file=sys.stderr)
    if len(fail) > 20:
        print(f"FAIL … and {len(fail) - 20} more", file=sys.stderr)
    sys.exit(1 if fail else 0)


if __name__ == "__main__":
    main()
