#!/usr/bin/env python3
"""Writes the vLLM conformance case specs (deterministic, no dependencies).

    python3 scripts/vllm-conformance/cases.py [--out DIR]

One JSON file per case in tests/data/vllm-conformance/cases/<name>.json (the
directory is emptied of *.json first). The format and the token-id rule are in
scripts/vllm-conformance/README.md; `prompt_token_ids` below is the one
implementation of that rule on the Python side (driver.py imports it).
"""
import argparse
import json
import math
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_OUT = ROOT / "tests" / "data" / "vllm-conformance" / "cases"
# Speculative decoding and LoRA cases: a folder of their own, so that the base
# conformance test (which wants every case in cases/ recorded) is unchanged.
FEATURES_OUT = ROOT / "tests" / "data" / "vllm-conformance" / "features" / "cases"
# Hybrid KV cache groups (full attention + sliding window / chunked local): a
# folder of their own as well (README, "Hybrid KV cache groups").
HYBRID_OUT = ROOT / "tests" / "data" / "vllm-conformance" / "hybrid" / "cases"

M = 2**64 - 1
SAMPLED_TOKEN = 7  # what the fake sampler always samples; prompts never contain it
BLOCK = 16


def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)


def tok(seed, stream, i):
    return 100 + splitmix64((seed << 40) ^ (stream << 20) ^ i) % 30000


mix = splitmix64  # the speculative acceptance function's mixer is the same function


def spec_key(r, node=0):
    """The request's acceptance key: mix(id ^ (node << 40)); conformance cases are
    single-node requests whose integer id is their index."""
    return mix(r ^ (node << 40))


def acceptance_probs(spec):
    """p_j for j = 1..k: the chance that draft j is accepted given drafts < j were.
    `rate: r` means alpha_j = r^j, so p_j = r exactly; a list [alpha_1..alpha_k]
    gives p_j = alpha_j / alpha_{j-1} in f64 (alpha_0 = 1; p_j = 0 after an
    alpha of 0)."""
    k = spec["k"]
    if "rate" in spec:
        return [float(spec["rate"])] * k
    alphas = [1.0] + [float(a) for a in spec["acceptance"]]
    assert len(alphas) == k + 1
    return [alphas[j] / alphas[j - 1] if alphas[j - 1] > 0 else 0.0 for j in range(1, k + 1)]


def uniform(seed, key, pos, j):
    """u_j in [0, 1): (mix(mix(mix(seed ^ key) ^ pos) ^ j) >> 11) / 2^53."""
    return (mix(mix(mix(seed ^ key) ^ pos) ^ j) >> 11) / float(1 << 53)


def accepted_drafts(spec, key, pos, drafts):
    """The largest a <= drafts with u_j < p_j for every j <= a."""
    p = acceptance_probs(spec)
    seed = spec.get("seed", 0)
    a = 0
    while a < drafts and uniform(seed, key, pos, a + 1) < p[a]:
        a += 1
    return a


def lora_ids(case):
    """Adapter name -> lora_int_id: 1, 2, ... in order of first use in `requests`."""
    ids = {}
    for q in case["requests"]:
        name = q.get("lora")
        if name is not None and name not in ids:
            ids[name] = len(ids) + 1
    return ids


def prompt_token_ids(case, r):
    """Prompt of request r of `case` (a parsed case spec)."""
    req = case["requests"][r]
    if "copy_of" in req:
        return prompt_token_ids(case, req["copy_of"])
    seed = case["seed"]
    n = req["prompt_len"]
    plen = 0
    if "prefix" in req:
        g = req["prefix"]
        plen = case["prefixes"][g]
        assert plen < n
    return [
        tok(seed, (1 << 19) + req["prefix"], i) if i < plen else tok(seed, r, i)
        for i in range(n)
    ]


_DEFAULT = object()


def engine(max_num_seqs=8, max_num_batched_tokens=256, long_prefill_token_threshold=0,
           num_gpu_blocks=4000, block_size=BLOCK, enable_prefix_caching=True,
           max_model_len=4096, scheduling_policy=None,
           prefix_cache_retention_interval=_DEFAULT):
    e = {
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "long_prefill_token_threshold": long_prefill_token_threshold,
        "num_gpu_blocks": num_gpu_blocks,
        "block_size": block_size,
        "enable_prefix_caching": enable_prefix_caching,
        "max_model_len": max_model_len,
    }
    if scheduling_policy is not None:
        e["scheduling_policy"] = scheduling_policy  # "fcfs" (vLLM's default) or "priority"
    if prefix_cache_retention_interval is not _DEFAULT:
        # CacheConfig.prefix_cache_retention_interval (0.33.0; default 0): null is
        # dense retention of sliding-window prefix-cache blocks.
        e["prefix_cache_retention_interval"] = prefix_cache_retention_interval
    return e


def req(arrival_step, prompt_len, output_len, prefix=None, copy_of=None, lora=False,
        priority=None):
    r = {"arrival_step": arrival_step, "prompt_len": prompt_len, "output_len": output_len}
    if priority is not None:
        r["priority"] = priority  # vLLM's per-request priority: lower is served first
    if lora is not False:
        r["lora"] = lora  # an adapter name, or None (the base model) in a LoRA case
    if prefix is not None:
        r["prefix"] = prefix
    if copy_of is not None:
        r["copy_of"] = copy_of
    return r


def case(name, eng, requests, seed, prefixes=(), timeout_steps=None, speculative=None,
         lora=None, kv_groups=None):
    c = {
        "name": name,
        "engine": eng,
        "timeout_steps": timeout_steps,
        "seed": seed,
        "prefixes": list(prefixes),
    }
    if speculative is not None:
        c["speculative"] = speculative
    if lora is not None:
        c["lora"] = lora
    if kv_groups is not None:
        c["kv_groups"] = kv_groups
    c["requests"] = requests
    return c


def blocks_needed(r):
    """Blocks one request needs at its longest (the last sampled token has no KV)."""
    return math.ceil((r["prompt_len"] + r["output_len"] - 1) / BLOCK)


def workload(rng, n, mean_gap, prompt_range, output_range, prefixes, prefix_share,
             copy_share=0.0, max_extra_tail=200):
    """Exponential inter-arrivals (in steps, floored), uniform lengths, a share of the
    requests opening with one of `prefixes`, and a share that repeat an earlier prompt."""
    reqs = []
    t = 0.0
    for r in range(n):
        if r > 0:
            t += rng.expovariate(1.0 / mean_gap)
        arrival = int(t)
        out = rng.randint(*output_range)
        if r > 0 and rng.random() < copy_share:
            k = rng.randrange(r)
            reqs.append(req(arrival, reqs[k]["prompt_len"], out, copy_of=k))
            continue
        plen = rng.randint(*prompt_range)
        if prefixes and rng.random() < prefix_share:
            g = rng.randrange(len(prefixes))
            if prefixes[g] >= plen:
                plen = prefixes[g] + rng.randint(1, max_extra_tail)
            reqs.append(req(arrival, plen, out, prefix=g))
        else:
            reqs.append(req(arrival, plen, out))
    return reqs


def named_cases():
    out = []

    # a: one long prompt, chunked by the budget.
    a = [req(0, 1000, 20)]
    out.append(case("a", engine(), a, seed=1))
    out.append(case("a_lpt", engine(long_prefill_token_threshold=128), a, seed=1))

    # b: 20 requests at once, prompts longer than the budget, max_num_seqs binds.
    rng = random.Random(2)
    b = [req(0, rng.randint(300, 700), rng.randint(5, 40)) for _ in range(20)]
    out.append(case("b", engine(), b, seed=2))
    out.append(case("b_lpt", engine(long_prefill_token_threshold=64), b, seed=2))

    # c: shared system prompts (not block aligned) with unique tails, an exact repeat,
    # a block-multiple prompt sent twice, and an idle gap before the second wave.
    c = [
        req(0, 260, 20, prefix=0),
        req(0, 389, 12, prefix=1),
        req(1, 150, 30, prefix=2),
        req(2, 300, 8),
        req(4, 400, 15, prefix=1),
        req(5, 230, 25, prefix=0),
        req(6, 100, 10, prefix=2),
        req(8, 256, 6),                 # 256 tokens = 16 full blocks
        req(10, 389, 3, copy_of=1),     # exact repeat of r1
        req(12, 345, 18, prefix=1),
        req(15, 90, 22, prefix=2),
        req(18, 210, 9, prefix=0),
        req(20, 500, 5),
        # second wave, after the engine has been idle for a while
        req(52, 256, 4, copy_of=7),     # the 256-token prompt again
        req(54, 373, 10, prefix=1),
        req(57, 201, 7, prefix=0),      # one token past its 200-token prefix
        req(62, 260, 6, copy_of=0),
        req(67, 80, 12, prefix=2),
        req(72, 300, 5, copy_of=3),
    ]
    out.append(case("c", engine(), c, seed=3, prefixes=[200, 333, 64]))

    # d: 8 long-output requests, 2 arrivals per step, 48 blocks: forced preemption.
    rng = random.Random(4)
    d = [req(i // 2, rng.randint(80, 200), rng.randint(100, 220)) for i in range(8)]
    out.append(case("d", engine(num_gpu_blocks=48), d, seed=4))

    # e: 200 requests, a 700-block cache, shared prefixes.
    rng = random.Random(5)
    e_prefixes = [rng.randint(16, 400) for _ in range(5)]
    e = workload(rng, 200, 3.0, (8, 900), (1, 200), e_prefixes, 0.4)
    e_eng = dict(max_num_seqs=16, max_num_batched_tokens=512, num_gpu_blocks=700)
    out.append(case("e", engine(**e_eng), e, seed=5, prefixes=e_prefixes))
    out.append(case("e_lpt", engine(**{**e_eng, "long_prefill_token_threshold": 128}),
                    e, seed=5, prefixes=e_prefixes))
    out.append(case("e_roomy", engine(**{**e_eng, "num_gpu_blocks": 20000}),
                    e, seed=5, prefixes=e_prefixes))
    out.append(case("e_nocache", engine(**{**e_eng, "enable_prefix_caching": False}),
                    e, seed=5, prefixes=e_prefixes))

    # abort: client timeouts of 25 steps. Bursts queue requests, long prompts take a
    # few steps to prefill, and the cache is small enough to preempt: requests are
    # aborted while waiting, mid-prefill and mid-decode, and about a third finish.
    rng = random.Random(6)
    ab_prefixes = [180, 90]
    ab = workload(rng, 30, 1.5, (50, 800), (1, 24), ab_prefixes, 0.3)
    out.append(case("abort", engine(num_gpu_blocks=110), ab, seed=6,
                    prefixes=ab_prefixes, timeout_steps=25))

    # abort_tight: timeouts of 40 steps while a 22-block cache preempts; about half
    # the requests finish.
    rng = random.Random(7)
    abt = workload(rng, 24, 7.0, (30, 200), (3, 40), [120], 0.3, max_extra_tail=100)
    out.append(case("abort_tight", engine(num_gpu_blocks=22), abt, seed=7,
                    prefixes=[120], timeout_steps=40))

    # mml: max_model_len 256. Totals of exactly 256, just below, and a few above
    # (rejected before they reach the scheduler).
    mml = [
        req(0, 200, 56),    # 256
        req(0, 255, 1),     # 256
        req(1, 100, 156),   # 256
        req(1, 250, 5),     # 255
        req(2, 256, 1),     # 257: rejected
        req(2, 128, 127),   # 255
        req(3, 16, 240),    # 256
        req(3, 240, 17),    # 257: rejected
        req(4, 130, 126),   # 256
        req(5, 200, 100),   # 300: rejected
        req(6, 255, 1, copy_of=1),  # 256
        req(8, 64, 191),    # 255
    ]
    out.append(case("mml", engine(max_num_seqs=4, max_num_batched_tokens=64,
                                  num_gpu_blocks=200, max_model_len=256), mml, seed=8))

    # split_prefix: a 40-token budget splits prefills inside blocks; later requests
    # share the prefix past the split (and one shares it while it is being computed).
    sp = [
        req(0, 230, 5, prefix=0),
        req(1, 120, 3, prefix=1),
        req(2, 170, 6, prefix=0),
        req(12, 190, 4, prefix=0),
        req(20, 100, 3, prefix=1),
        req(20, 230, 2, copy_of=0),
        req(30, 300, 2, prefix=0),
        req(31, 151, 3, prefix=0),
    ]
    out.append(case("split_prefix", engine(max_num_seqs=4, max_num_batched_tokens=40),
                    sp, seed=9, prefixes=[150, 77]))
    # ... and with a 24-token threshold, so that two prefills share each step's budget
    # and requests compute the same prefix blocks at the same time.
    out.append(case("split_prefix_lpt", engine(max_num_seqs=4, max_num_batched_tokens=40,
                                               long_prefill_token_threshold=24),
                    sp, seed=9, prefixes=[150, 77]))
    return out


def random_engine(rng, blocks):
    """A random engine for requests needing `blocks` blocks each (tight,
    medium or roomy cache) and a timeout or none, drawn from `rng` in this
    order (the committed random cases depend on it)."""
    need = max(blocks) + 1
    total = sum(blocks) + 1
    kind = rng.choice(["tight", "tight", "medium", "roomy"])
    if kind == "tight":
        num_gpu_blocks = need + rng.randint(0, need)
    elif kind == "medium":
        num_gpu_blocks = rng.randint(need, max(need, total // 2))
    else:
        num_gpu_blocks = total + rng.randint(0, 200)
    eng = engine(
        max_num_seqs=rng.randint(2, 16),
        max_num_batched_tokens=rng.randint(64, 512),
        long_prefill_token_threshold=rng.choice([0, 0, 16, 64, 128]),
        num_gpu_blocks=num_gpu_blocks,
        enable_prefix_caching=rng.random() < 0.8,
    )
    timeout = rng.randint(20, 150) if rng.random() < 0.25 else None
    return eng, timeout


def random_case(i):
    rng = random.Random(1000 + i)
    n = rng.randint(15, 60)
    mean_gap = rng.uniform(0.5, 4.0)
    prefixes = [rng.randint(16, 300) for _ in range(rng.randint(2, 5))]
    reqs = workload(rng, n, mean_gap, (8, 600), (1, 64), prefixes, 0.4,
                    copy_share=0.06, max_extra_tail=100)
    eng, timeout = random_engine(rng, [blocks_needed(r) for r in reqs])
    return case(f"rand-{i:03d}", eng, reqs, seed=100 + i, prefixes=prefixes,
                timeout_steps=timeout)


def all_cases():
    return named_cases() + [random_case(i) for i in range(50)]


def eagle(k, seed=0, **acc):
    return {"method": "eagle", "k": k, **acc, "seed": seed}


def feature_cases():
    """Speculative decoding, LoRA and priority cases (README, "Features"): small, tens of steps."""
    out = []
    # spec_a: EAGLE, K = 3, alpha_j = 0.7^j. A 20-block cache that the lookahead
    # slots overflow (preemption), outputs of 1 and 2 tokens (no draft is ever
    # verified / drafts past max_tokens), and a request ending exactly at
    # max_model_len (128), where vLLM trims the drafts to the model length.
    sa = [
        req(0, 60, 30),
        req(0, 50, 25),
        req(1, 70, 12),
        req(2, 33, 2),
        req(3, 45, 1),
        req(4, 100, 28),   # 128 = max_model_len
        req(6, 40, 20),
        req(9, 20, 9),
    ]
    out.append(case("spec_a", engine(max_num_seqs=6, max_num_batched_tokens=96,
                                     num_gpu_blocks=20, max_model_len=128),
                    sa, seed=11, speculative=eagle(3, rate=0.7)))
    # spec_b: EAGLE, K = 2, per-position acceptance [0.8, 0.5], seed 5, roomy
    # cache, prefix sharing (EAGLE drops the last matched block of a hit).
    sb = [
        req(0, 100, 12, prefix=0),
        req(0, 90, 15),
        req(2, 120, 10, prefix=0),
        req(5, 100, 6, copy_of=0),
        req(8, 64, 9),
        req(10, 64, 4, copy_of=4),
    ]
    out.append(case("spec_b", engine(max_num_seqs=4, max_num_batched_tokens=128,
                                     num_gpu_blocks=200),
                    sb, seed=12, prefixes=[48], speculative=eagle(2, seed=5, acceptance=[0.8, 0.5])))
    # spec_full: EAGLE, K = 3, rate 1: every draft accepted (4 tokens a step).
    sf = [req(0, 40, 17), req(1, 30, 9), req(2, 50, 4)]
    out.append(case("spec_full", engine(max_num_seqs=4, max_num_batched_tokens=64,
                                        num_gpu_blocks=100),
                    sf, seed=13, speculative=eagle(3, rate=1.0)))
    # spec_c: n-gram, K = 4, rate 0.6: no lookahead slots. A 24-token budget with
    # a 20-token prefill threshold: the long prompt that runs ahead of the short
    # one leaves it 4 tokens, which trims its drafts (1 token + 3 drafts).
    sc = [
        req(0, 100, 6),
        req(0, 4, 12),
        req(2, 30, 10),
        req(3, 25, 8),
        req(7, 50, 6),
    ]
    out.append(case("spec_c", engine(max_num_seqs=4, max_num_batched_tokens=24,
                                      long_prefill_token_threshold=20, num_gpu_blocks=60),
                    sc, seed=14, speculative={"method": "ngram", "k": 4, "rate": 0.6, "seed": 0}))
    # lora_a: max_loras 2, four adapters and base-model requests, interleaved so
    # that the waiting queue's skip rule fires; a 16-block cache preempts.
    names = ["a", "b", "c", "d"]
    rng = random.Random(15)
    la = []
    for i in range(16):
        lora = None if i % 5 == 4 else names[rng.randrange(4)]
        la.append(req(i // 3, rng.randint(20, 90), rng.randint(3, 20), lora=lora))
    out.append(case("lora_a", engine(max_num_seqs=6, max_num_batched_tokens=128,
                                     num_gpu_blocks=16),
                    la, seed=15, lora={"max_loras": 2, "max_lora_rank": 16}))
    # lora_b: prefix caching across adapters: the same prompt under adapter a,
    # adapter b, the base model, and a again (only the last hits).
    lb = [
        req(0, 96, 4, lora="a"),
        req(6, 96, 4, copy_of=0, lora="b"),
        req(12, 96, 4, copy_of=0, lora=None),
        req(18, 96, 4, copy_of=0, lora="a"),
        req(24, 80, 3, prefix=0, lora="b"),
        req(30, 70, 3, prefix=0, lora="b"),
        req(30, 70, 3, prefix=0, lora="a"),
    ]
    out.append(case("lora_b", engine(max_num_seqs=4, max_num_batched_tokens=128,
                                     num_gpu_blocks=100),
                    lb, seed=16, prefixes=[40], lora={"max_loras": 2, "max_lora_rank": 8}))
    out += priority_cases()
    return out


def priority_cases():
    """`scheduling_policy: priority` (README, "Features" -> "Priority"). At most 10
    requests each: vLLM breaks a (priority, arrival) tie by request id as a
    string, and ids 0..9 sort as strings as they do as numbers."""
    prio = "priority"
    out = []
    # prio_a: mixed priorities arriving over steps 0..6 in a 20-block cache: the
    # decodes outgrow it, and each time the running request that cannot grow
    # preempts the lowest-priority (then latest) running request, itself
    # included; r2 preempts itself while running requests follow it (<= 0.19:
    # the running pass stops there; 0.33: it goes on), and once it is the
    # first running request (a sync step that schedules nothing in <= 0.19).
    pa = [
        req(0, 60, 25, priority=3),
        req(0, 50, 20, priority=0),
        req(1, 40, 24, priority=3),
        req(2, 45, 27, priority=2),
        req(3, 30, 30, priority=2),
        req(4, 50, 28, priority=1),
        req(5, 35, 21, priority=1),
        req(6, 40, 15, priority=1),
        req(6, 20, 29, priority=2),
    ]
    out.append(case("prio_a", engine(max_num_seqs=6, max_num_batched_tokens=128,
                                     num_gpu_blocks=20, scheduling_policy=prio),
                    pa, seed=21))
    # prio_b: two slots, so a waiting queue forms. Equal priorities arriving
    # together or apart are served by arrival (then id); a late priority -1
    # request jumps the queue but preempts no one. Prefills chunk at 32 tokens
    # (long_prefill_token_threshold) within a 64-token budget.
    pb = [
        req(0, 100, 8, priority=1),
        req(0, 70, 6, priority=1),
        req(0, 40, 6, priority=1),
        req(1, 90, 5, priority=0),
        req(2, 30, 6, priority=1),
        req(3, 50, 4, priority=0),
        req(9, 120, 4, priority=-1),
        req(10, 20, 5, priority=1),
        req(10, 60, 5, priority=0),
    ]
    out.append(case("prio_b", engine(max_num_seqs=2, max_num_batched_tokens=64,
                                     long_prefill_token_threshold=32, num_gpu_blocks=200,
                                     scheduling_policy=prio),
                    pb, seed=22))
    # prio_c: prefix caching under priority: two 48-token system prompts, an
    # exact repeat, high-priority requests sharing a prefix that is cached when
    # they jump the queue, and a 17-block cache in which preempted requests are
    # resumed with hits on their own blocks.
    pc = [
        req(0, 80, 20, prefix=0, priority=2),
        req(0, 70, 18, prefix=1, priority=2),
        req(1, 90, 14, prefix=0, priority=2),
        req(2, 64, 16, prefix=0, priority=0),
        req(3, 80, 10, copy_of=0, priority=0),
        req(4, 60, 12, prefix=1, priority=2),
        req(5, 100, 8, prefix=1, priority=2),
        req(8, 56, 10, prefix=0, priority=2),
    ]
    out.append(case("prio_c", engine(max_num_seqs=4, max_num_batched_tokens=96,
                                     num_gpu_blocks=17, scheduling_policy=prio),
                    pc, seed=23, prefixes=[48, 40]))
    # prio_d: victims already scheduled in their step. The two least urgent
    # requests (priority 3, arrival 0) stand first in `running`; when a more
    # urgent one behind them needs a block, the victim is r0 (first of the
    # equal (priority, arrival)), whose decode was scheduled earlier in the
    # same step: it leaves the batch and its tokens go back to the budget
    # (async: its previous step still in flight). Self-preemptions and
    # resumes with hits on its own blocks follow in a 12-block cache.
    pd = [
        req(0, 46, 30, priority=3),
        req(0, 20, 12, priority=3),
        req(1, 28, 40, priority=0),
        req(1, 40, 30, priority=1),
        req(4, 30, 20, priority=2),
        req(6, 18, 20, priority=0),
    ]
    out.append(case("prio_d", engine(max_num_seqs=4, max_num_batched_tokens=64,
                                     num_gpu_blocks=12, scheduling_policy=prio),
                    pd, seed=24))
    return out


def full(): return {"kind": "full"}
def sw(window): return {"kind": "sliding_window", "window": window}
def chunked(chunk): return {"kind": "chunked_local", "chunk": chunk}


def hybrid_blocks_needed(r):
    """A safe bound on the blocks one request holds alone with one full-attention
    and one local (sliding-window / chunked-local) group: the local group never
    holds more blocks than the full one."""
    return 2 * blocks_needed(r)


def hybrid_cases():
    """One full-attention group plus one sliding-window (or chunked-local) group
    sharing one block pool (README, "Hybrid KV cache groups"). Block size 16, at
    most 40 requests each."""
    out = []
    hyb = dict(max_num_seqs=8, max_num_batched_tokens=128)
    # hyb_a: long prompts chunked by a 128-token budget, so the window group
    # frees blocks behind the window during prefill and decode; two shared
    # system prompts (200 and 333 tokens); exact repeats, one while its original
    # is still prefilling and others after theirs finished; a roomy cache.
    a = [
        req(0, 900, 40),
        req(0, 300, 30, prefix=0),
        req(1, 620, 25, prefix=1),
        req(3, 450, 20, prefix=0),
        req(5, 300, 12, copy_of=1),      # r1 still running
        req(8, 700, 35),
        req(12, 520, 18, prefix=1),
        req(40, 350, 15, prefix=1),
        req(90, 900, 10, copy_of=0),     # r0 finished long ago
        req(92, 620, 8, copy_of=2),
        req(95, 400, 20, prefix=0),
        req(100, 300, 6, copy_of=1),
        req(101, 201, 5, prefix=0),      # one token past its prefix
    ]
    out.append(case("hyb_a", engine(**hyb, num_gpu_blocks=2000), a, seed=31,
                    prefixes=[200, 333], kv_groups=[full(), sw(64)]))
    # hyb_w50: the same with a 50-token window (not a multiple of the block size).
    out.append(case("hyb_w50", engine(**hyb, num_gpu_blocks=2000), a, seed=31,
                    prefixes=[200, 333], kv_groups=[full(), sw(50)]))
    # hyb_b: short prompts with long decodes, 2 arrivals per step, two shared
    # system prompts and two late resends, in a 76-block pool (both groups):
    # admission lets them in, then the full group's growth forces preemption,
    # and a resumed request's hit is limited by what the window group cached.
    rng = random.Random(32)
    b = []
    for i in range(14):
        plen = rng.randint(60, 200)
        out_len = rng.randint(100, 200)
        g = i % 3
        if g < 2 and plen > (48, 80)[g]:
            b.append(req(i // 2, plen, out_len, prefix=g))
        else:
            b.append(req(i // 2, plen, out_len))
    b.append(req(30, b[1]["prompt_len"], 40, copy_of=1))
    b.append(req(40, b[3]["prompt_len"], 30, copy_of=3))
    out.append(case("hyb_b", engine(max_num_seqs=6, max_num_batched_tokens=128,
                                    num_gpu_blocks=76),
                    b, seed=32, prefixes=[48, 80], kv_groups=[full(), sw(64)]))
    # hyb_c: the window group's hit rule. Under vLLM's default retention
    # (prefix_cache_retention_interval 0) the window group caches only the
    # cdiv(W - 1, 16) blocks ending at the prompt's replay boundary (and at a
    # shared-prefix junction seen at admission), so: a resend of a finished
    # prompt hits; a new tail on a 400-token shared prefix hits 0 although the
    # full group has all 25 blocks (and pins the junction); the next sibling
    # hits 400; a prompt of prefix + 1 token caches the junction tail itself,
    # so its siblings hit at once; a block-aligned prompt sent twice.
    c = [
        req(0, 500, 5, prefix=0),
        req(20, 500, 5, copy_of=0),      # resend after r0 finished
        req(26, 460, 5, prefix=0),       # full 400, window 0
        req(36, 480, 5, prefix=0),       # junction now cached: 400
        req(42, 401, 5, prefix=0),
        req(48, 301, 4, prefix=1),       # prefix + 1: caches the junction tail
        req(56, 500, 4, prefix=1),       # hits 288 at once
        req(64, 500, 4, copy_of=6),      # resend of r6
        req(70, 256, 4),
        req(78, 256, 3, copy_of=8),      # block-aligned: hit 240
        req(84, 700, 30),                # long prompt, long decode...
        req(120, 700, 3, copy_of=10),    # ...resent: replay boundary hit only
    ]
    out.append(case("hyb_c", engine(**hyb, num_gpu_blocks=2000), c, seed=33,
                    prefixes=[400, 300], kv_groups=[full(), sw(64)]))
    # hyb_c_dense: the same with dense retention (null): every window block is
    # cached, so r2 hits 400 at once.
    out.append(case("hyb_c_dense", engine(**hyb, num_gpu_blocks=2000,
                                          prefix_cache_retention_interval=None),
                    c, seed=33, prefixes=[400, 300], kv_groups=[full(), sw(64)]))
    # hyb_cl: full attention + chunked local attention (chunk 64).
    cl = [
        req(0, 500, 20, prefix=0),
        req(2, 300, 30),
        req(4, 460, 12, prefix=0),
        req(30, 500, 6, copy_of=0),
        req(32, 300, 10, copy_of=1),
        req(40, 410, 8, prefix=0),
    ]
    out.append(case("hyb_cl", engine(**hyb, num_gpu_blocks=400), cl, seed=34,
                    prefixes=[400], kv_groups=[full(), chunked(64)]))
    out += [hybrid_random_case(i) for i in range(10)]
    return out


def hybrid_random_case(i, base=3700):
    """Like random_case, with a full + sliding-window pair of groups, at most 40
    requests and a window from {32, 50, 64, 128}. The seeds (3700 + i) give all
    four windows, prefix caching in 8 of the 10 cases and timeouts in 3."""
    rng = random.Random(base + i)
    n = rng.randint(15, 40)
    mean_gap = rng.uniform(0.5, 4.0)
    prefixes = [rng.randint(16, 300) for _ in range(rng.randint(2, 5))]
    reqs = workload(rng, n, mean_gap, (8, 600), (1, 64), prefixes, 0.4,
                    copy_share=0.1, max_extra_tail=100)
    window = rng.choice([32, 50, 64, 128])
    eng, timeout = random_engine(rng, [hybrid_blocks_needed(r) for r in reqs])
    return case(f"hyb_rand-{i:03d}", eng, reqs, seed=200 + i, prefixes=prefixes,
                timeout_steps=timeout, kv_groups=[full(), sw(window)])


def print_vectors():
    """Test vectors of the acceptance function, for the Rust side."""
    print("# seed key pos j -> u_j (and mix(r) keys)")
    for r in (0, 1, 7):
        print(f"spec_key({r}) = {spec_key(r):#018x}")
    for seed in (0, 5, 0xDEADBEEF):
        for r in (0, 3):
            key = spec_key(r)
            for pos in (1, 2, 40):
                us = [uniform(seed, key, pos, j) for j in (1, 2, 3)]
                print(f"seed={seed} key={key:#018x} pos={pos} "
                      + " ".join(f"u{j}={u!r}" for j, u in zip((1, 2, 3), us)))
    for spec in (eagle(3, rate=0.7), eagle(2, seed=5, acceptance=[0.8, 0.5])):
        print(f"{spec}: accepted(r=0..5, pos=1..6, drafts=K) = "
              + str([[accepted_drafts(spec, spec_key(r), pos, spec["k"]) for pos in range(1, 7)]
                     for r in range(6)]))


def check(c):
    e = c["engine"]
    reqs = c["requests"]
    last = 0
    spec = c.get("speculative")
    lookahead = spec["k"] if spec is not None and spec["method"] == "eagle" else 0
    if spec is not None:
        assert spec["method"] in ("eagle", "ngram") and spec["k"] >= 1
        assert ("rate" in spec) != ("acceptance" in spec)
    if "lora" in c:
        assert 1 <= c["lora"]["max_loras"]
        assert all("lora" in q for q in reqs), c["name"]
    assert e.get("scheduling_policy", "fcfs") in ("fcfs", "priority")
    if any("priority" in q for q in reqs):
        assert e.get("scheduling_policy") == "priority", c["name"]
        # (priority, arrival) ties break by request id as a string: keep ids < 10
        assert len(reqs) <= 10, c["name"]
    for r, q in enumerate(reqs):
        assert q["arrival_step"] >= last, (c["name"], r)
        if "lora" in q:
            assert "lora" in c, (c["name"], r)
        last = q["arrival_step"]
        assert q["prompt_len"] >= 1 and q["output_len"] >= 1
        if "copy_of" in q:
            k = q["copy_of"]
            assert k < r and reqs[k]["prompt_len"] == q["prompt_len"] and "prefix" not in q
        if "prefix" in q:
            assert c["prefixes"][q["prefix"]] < q["prompt_len"]
        if q["prompt_len"] + q["output_len"] <= e["max_model_len"]:
            # every admissible request fits in the cache on its own (null block aside)
            # (with EAGLE's lookahead slots, which vLLM allocates beyond the tokens)
            assert math.ceil((q["prompt_len"] + q["output_len"] - 1 + lookahead)
                             / e["block_size"]) <= e["num_gpu_blocks"] - 1, (c["name"], r)
        assert SAMPLED_TOKEN not in prompt_token_ids(c, r)
    if "kv_groups" in c:
        groups = c["kv_groups"]
        assert len(groups) == 2 and groups[0] == {"kind": "full"}, c["name"]
        g = groups[1]
        assert g["kind"] in ("sliding_window", "chunked_local"), c["name"]
        assert g.get("window", g.get("chunk", 0)) >= 1 and len(reqs) <= 40, c["name"]
        assert "speculative" not in c and "lora" not in c, c["name"]
        for r, q in enumerate(reqs):
            if q["prompt_len"] + q["output_len"] <= e["max_model_len"]:
                # fits alone in the shared pool (both groups, null block aside)
                assert hybrid_blocks_needed(q) <= e["num_gpu_blocks"] - 1, (c["name"], r)


def dump(c):
    """Stable, diff-friendly JSON: one request per line."""
    head = {k: v for k, v in c.items() if k != "requests"}
    lines = [json.dumps(head, separators=(", ", ": "))[:-1] + ', "requests": [']
    rows = [json.dumps(q, separators=(", ", ": ")) for q in c["requests"]]
    lines.append(",\n".join("  " + row for row in rows))
    lines.append("]}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--features-out", type=Path, default=FEATURES_OUT)
    ap.add_argument("--hybrid-out", type=Path, default=HYBRID_OUT)
    ap.add_argument("--vectors", action="store_true",
                    help="print test vectors of the speculative acceptance function")
    args = ap.parse_args()
    if args.vectors:
        print_vectors()
        return
    names = set()
    for out, cases in ((args.out, all_cases()), (args.features_out, feature_cases()),
                       (args.hybrid_out, hybrid_cases())):
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("*.json"):
            old.unlink()
        for c in cases:
            assert c["name"] not in names
            names.add(c["name"])
            check(c)
            text = dump(c)
            assert json.loads(text) == c
            (out / f"{c['name']}.json").write_text(text)
        print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()
