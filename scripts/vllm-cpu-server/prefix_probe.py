#!/usr/bin/env python3
"""Measures what `observe` relies on, against a running server (stdlib only):

1. /tokenize on a text prompt: its `count` and `tokens`, and that /v1/completions'
   `usage.prompt_tokens` for the same text (and for the same ids as a token-id
   prompt) agrees with it.
2. Prefix caching: two requests whose token-id prompts share a prefix of P tokens
   (default 80 = 2.5 blocks of 32) and then differ; the /metrics counters
   `vllm:prefix_cache_queries_total` / `vllm:prefix_cache_hits_total` before and after
   each. Expected: the second request hits floor(P / block) * block tokens (at most
   floor((len - 1) / block) * block: the last prompt token is always computed).

Usage: python prefix_probe.py [--base http://127.0.0.1:8000] [--model tiny] [--prefix 80]
Prints one JSON object; exits 1 if a check fails.
"""
import argparse
import json
import random
import sys
import urllib.request


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def counters(base):
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        text = r.read().decode()
    want = {"vllm:prefix_cache_queries_total": "queries", "vllm:prefix_cache_hits_total": "hits",
            "vllm:prompt_tokens_total": "prompt_tokens"}
    out = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in want:
            out[want[name]] = out.get(want[name], 0.0) + float(line.rsplit(" ", 1)[1])
    block = None
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            block = int(line.split('block_size="', 1)[1].split('"', 1)[0])
    return out, block


def complete(base, model, prompt):
    r = post(base, "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 4,
                                       "min_tokens": 4, "ignore_eos": True, "temperature": 0})
    return r["usage"]["prompt_tokens"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--prefix", type=int, default=80)
    ap.add_argument("--suffix", type=int, default=40)
    ap.add_argument("--seed", type=int, default=None, help="default: a fresh one, so the prefix is new")
    a = ap.parse_args()
    fails = []
    res = {}

    text = "The quick brown fox jumps over the lazy dog, twice."
    tok = post(a.base, "/tokenize", {"model": a.model, "prompt": text})
    res["tokenize"] = {"text": text, "response": tok}
    pt_text = complete(a.base, a.model, text)
    pt_ids = complete(a.base, a.model, tok["tokens"])
    res["tokenize"]["usage_prompt_tokens_text"] = pt_text
    res["tokenize"]["usage_prompt_tokens_ids"] = pt_ids
    if not (tok["count"] == len(tok["tokens"]) == pt_text == pt_ids):
        fails.append(f"tokenize count {tok['count']} vs usage {pt_text} (text) / {pt_ids} (ids)")

    # Random ids from the ordinary part of the vocabulary (the 4 special tokens are 0..3
    # in make_model.py's tokenizer), new each run unless --seed: a prefix the cache has
    # not seen.
    rng = random.Random(a.seed)
    prefix = [rng.randrange(100, 8000) for _ in range(a.prefix)]
    p1 = prefix + [rng.randrange(100, 8000) for _ in range(a.suffix)]
    p2 = prefix + [rng.randrange(100, 8000) for _ in range(a.suffix)]
    c0, block = counters(a.base)
    complete(a.base, a.model, p1)
    c1, _ = counters(a.base)
    complete(a.base, a.model, p2)
    c2, _ = counters(a.base)
    d1 = {k: c1[k] - c0[k] for k in c0}
    d2 = {k: c2[k] - c1[k] for k in c1}
    # Whole shared blocks hit, but never the prompt's last token: vLLM computes at
    # least one token, so an identical prompt of 64 tokens hits 32, not 64.
    expect = min(a.prefix // block, (len(p2) - 1) // block) * block
    res["prefix"] = {"block_size": block, "prefix_tokens": a.prefix, "prompt_tokens": len(p1),
                     "first": d1, "second": d2, "expected_second_hits": expect}
    if d1["queries"] != len(p1) or d2["queries"] != len(p2):
        fails.append(f"queries rose by {d1['queries']}/{d2['queries']}, expected {len(p1)}/{len(p2)}")
    if d1["hits"] != 0:
        fails.append(f"first request hit {d1['hits']} tokens, expected 0 (fresh prefix)")
    if d2["hits"] != expect:
        fails.append(f"second request hit {d2['hits']} tokens, expected {expect}")
    res["failures"] = fails
    print(json.dumps(res, indent=1))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
