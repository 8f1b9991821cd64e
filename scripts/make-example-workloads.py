#!/usr/bin/env python3
"""Writes the example workloads shipped in sweeps/workloads/ (deterministic: fixed seeds).

    python3 scripts/make-example-workloads.py

chat-200.jsonl    200 chat requests, Poisson arrivals at 8 req/s, lognormal prompt and
                  output lengths (ShareGPT-like medians), every prompt opening with one of
                  4 shared 128-token system prompts (token ids, so the prefix cache sees them).
agentic-40.jsonl  40 agent requests: plan (llm) -> fan-out to 2 tool calls -> fan-in to a
                  follow-up llm call whose prompt extends the first prompt (prefix reuse),
                  with think-time intervals.
"""
import json
import math
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "sweeps" / "workloads"
VOCAB = 32000


def lognormal(rng, median, sigma, lo, hi):
    return max(lo, min(hi, int(round(median * math.exp(rng.gauss(0.0, sigma))))))


def chat(rng):
    systems = [[rng.randrange(VOCAB) for _ in range(128)] for _ in range(4)]
    t = 0.0
    rows = []
    for i in range(200):
        t += rng.expovariate(8.0)
        user = lognormal(rng, 160, 0.8, 8, 1500)
        out = lognormal(rng, 180, 0.7, 4, 1024)
        ids = systems[rng.randrange(4)] + [rng.randrange(VOCAB) for _ in range(user)]
        rows.append({
            "request_id": i,
            "arrival_time": round(t, 6),
            "initial": [0],
            "sub_requests": [{
                "kind": "llm", "input_tokens": len(ids), "output_tokens": out, "next": [],
                "interval": 0.0, "input_token_ids": ids,
            }],
        })
    return rows


def agentic(rng):
    t = 0.0
    rows = []
    for i in range(40):
        t += rng.expovariate(2.0)
        prompt = [rng.randrange(VOCAB) for _ in range(lognormal(rng, 900, 0.4, 200, 3000))]
        plan_out = lognormal(rng, 60, 0.5, 8, 400)
        follow = prompt + [rng.randrange(VOCAB) for _ in range(plan_out + 120)]
        rows.append({
            "request_id": f"agent-{i}",
            "arrival_time": round(t, 6),
            "initial": [0],
            "sub_requests": [
                {"kind": "llm", "input_tokens": len(prompt), "output_tokens": plan_out, "next": [1, 2],
                 "interval": 0.0, "input_token_ids": prompt},
                {"kind": "tool_call", "input_tokens": 0, "output_tokens": 0, "next": [3],
                 "interval": 0.002, "duration": round(rng.uniform(0.05, 1.5), 6)},
                {"kind": "tool_call", "input_tokens": 0, "output_tokens": 0, "next": [3],
                 "interval": 0.002, "duration": round(rng.uniform(0.05, 1.5), 6)},
                {"kind": "llm", "input_tokens": len(follow), "output_tokens": lognormal(rng, 200, 0.5, 8, 800),
                 "next": [], "interval": 0.01, "input_token_ids": follow},
            ],
        })
    return rows


def write(name, rows):
    with open(OUT / name, "w") as f:
        for r in rows:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    write("chat-200.jsonl", chat(random.Random(20261129)))
    write("agentic-40.jsonl", agentic(random.Random(7)))
