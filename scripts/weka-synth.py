#!/usr/bin/env python3
"""Writes a synthetic agentic-coding corpus in the Weka trace format (one
session per line, the schema of kv-cache-tester / aiperf's WekaTrace) for
tests and the README's AgentX example: the real corpora
(semianalysisai/cc-traces-weka-*) live on Hugging Face, which CI cannot
reach. Structure, not statistics, is what this reproduces: main turns whose
prompts extend the last one (prefix-hash ids of 64-token blocks, the partial
last block unhashed), tool gaps and the odd long user pause, compaction back
to the system prefix past a context limit, and subagents (sequential calls
that extend their own context, sometimes several in parallel, sometimes
outliving the turn they were spawned from). Every number below is a round
figure chosen to give that shape, not fitted to the real corpus.

    python3 scripts/weka-synth.py --sessions 64 --seed 1 > corpus.jsonl
"""

import argparse
import json
import random

BLOCK = 64
SYSTEM = 12_000  # tokens of system prompt and tool definitions (round figure)
SUB_SYSTEM = 4_000  # a subagent's own system prompt, shared by the session's subagents
COMPACT_AT = 120_000  # prompt tokens past which the agent compacts its context
TOKENS_PER_S = 50.0  # decode speed the recorded api_time assumes


class Ids:
    """Fresh hash ids, one counter per session (hash_id_scope: local)."""

    def __init__(self):
        self.n = 0

    def take(self, k):
        out = list(range(self.n + 1, self.n + 1 + k))
        self.n += k
        return out


class Context:
    """A growing prompt and its prefix-block hash ids."""

    def __init__(self, ids, prefix_ids, prefix_tokens):
        self.ids = ids
        self.tokens = prefix_tokens
        self.blocks = list(prefix_ids)

    def grow(self, k):
        self.tokens += k
        full = self.tokens // BLOCK
        if full > len(self.blocks):
            self.blocks += self.ids.take(full - len(self.blocks))

    def call(self, rng, t, model, out):
        api = round(0.3 + out / TOKENS_PER_S, 3)
        row = {"t": round(t, 3), "type": "s", "model": model, "in": self.tokens, "out": out,
               "hash_ids": list(self.blocks), "api_time": api}
        self.grow(out)
        return row, api


def subagent(rng, ids, shared, t, agent_no):
    ctx = Context(ids, shared, SUB_SYSTEM)
    ctx.grow(rng.randint(300, 2_000))
    calls = []
    for _ in range(rng.randint(2, 8)):
        row, api = ctx.call(rng, t, "claude-haiku", rng.randint(40, 500))
        calls.append(row)
        t += api + rng.uniform(0.2, 3.0)
        ctx.grow(rng.randint(200, 3_000))
    return {"t": round(calls[0]["t"], 3), "type": "subagent", "agent_id": f"agent_{agent_no:03d}",
            "subagent_type": "Explore", "status": "completed", "requests": calls,
            "models": ["claude-haiku"]}, calls[-1]["t"] + calls[-1]["api_time"]


def session(rng, k):
    ids = Ids()
    system = ids.take(SYSTEM // BLOCK)
    ctx = Context(ids, system, SYSTEM)
    ctx.grow(rng.randint(100, 1_500))
    shared_sub = None
    t, entries, agents = 0.0, [], 0
    for _ in range(rng.randint(12, 40)):
        row, api = ctx.call(rng, t, "claude-opus", rng.randint(30, 900))
        entries.append(row)
        t += api
        if rng.random() < 0.2:
            if shared_sub is None:
                shared_sub = ids.take(SUB_SYSTEM // BLOCK)
            ends = []
            for _ in range(rng.choice([1, 1, 2, 3])):
                agents += 1
                sub, end = subagent(rng, ids, shared_sub, t + rng.uniform(0.05, 0.5), agents)
                entries.append(sub)
                ends.append(end)
            # Usually the agent waits for its subagents; now and then one is
            # left running in the background.
            t = max(ends) if rng.random() < 0.85 else min(ends)
            ctx.grow(sum(rng.randint(200, 1_500) for _ in ends))
        t += rng.uniform(0.3, 6.0) if rng.random() < 0.9 else rng.uniform(20.0, 90.0)
        ctx.grow(rng.randint(100, 4_000))
        if ctx.tokens > COMPACT_AT:
            ctx = Context(ids, system, SYSTEM)
            ctx.grow(rng.randint(2_000, 6_000))
    return {"id": f"session_{k:04d}", "models": ["claude-opus", "claude-haiku"], "block_size": BLOCK,
            "hash_id_scope": "local", "requests": entries}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rng = random.Random(a.seed)
    for k in range(a.sessions):
        print(json.dumps(session(rng, k), separators=(",", ":")))


if __name__ == "__main__":
    main()
