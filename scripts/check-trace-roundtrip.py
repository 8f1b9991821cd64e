#!/usr/bin/env python3
"""TraceV2 round trips: each workload is run with `--trace-output`, the pair
replayed (`--session-mode closed-loop`, so a multi-call request is one
session again) with the same scenario, and the two runs' TTFT, ITL and E2E
means and prefix-cache hit rate compared; a row passes when every one is
within 0.5 % (absolute 0.05 percentage points for the hit rate when the run
had none). Request DAGs that fork or join (agentic-40, the agent traces
replayed closed-loop) are included: their sessions carry the DAG in the
`dag` column. An export that is refused is a failure.

Usage: scripts/check-trace-roundtrip.py [--small] [BLIS]
  BLIS: the binary (default target/release/blis-sweep; build it first).
  --small: only the example workloads and tests/data samples (no ../shared/data).
Exit status 1 when a row that was exported differs.
"""

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")
S8B = "sweeps/scenarios/llama-3.1-8b-h100-tp1.yaml"
D04 = "tests/data/defects/04-trace-roundtrip"
D17 = "tests/data/defects/17-tracev2-prefix-loss"
# The replay's horizon: later than any of these runs ends, so BLIS's default
# (twice the last arrival) cuts nothing the original run finished.
HORIZON_S = "100000000"
# The tolerance the issue sets for a round trip.
TOLERANCE = 0.005

# (name, scenario, input args of the original run, generate spec or None)
CASES = [
    ("chat-200", S8B, ["sweeps/workloads/chat-200.jsonl"], None),
    ("agentic-40", S8B, ["sweeps/workloads/agentic-40.jsonl"], None),
    ("04 chain (think 0)", f"{D04}/S.yaml", [f"{D04}/chain.jsonl"], None),
    ("04 chain (think 0.5 s)", f"{D04}/S.yaml", [f"{D04}/chain-think.jsonl"], None),
    ("04 root interval", f"{D04}/S.yaml", [f"{D04}/root-interval.jsonl"], None),
    ("17 chat, 4 prefixes", f"{D17}/S.yaml", [], f"{D17}/spec.yaml"),
    ("sample mooncake", S8B, ["--input", "mooncake:tests/data/import/mooncake.jsonl"], None),
    ("sample azure", S8B, ["--input", "azure:tests/data/import/azure.csv"], None),
    (
        "sample agent-calls fixed-acc",
        S8B,
        ["--input", "agent-calls:tests/data/import/agent_calls.csv", "--session-rate", "0.5",
         "--session-mode", "fixed-accumulate"],
        None,
    ),
    (
        "sample agent-calls closed",
        S8B,
        ["--input", "agent-calls:tests/data/import/agent_calls.csv", "--session-rate", "0.5"],
        None,
    ),
    ("sample tracev2", S8B, ["--trace-header", "tests/data/import/trace.yaml", "--trace-data",
                             "tests/data/import/trace.csv", "--session-mode", "closed-loop"], None),
]
REAL = [
    ("azure conv (1 h)", S8B, ["--input", f"azure:{SHARED}/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv"], None),
    ("azure code (1 h)", S8B, ["--input", f"azure:{SHARED}/azure-llm-inference-2023/AzureLLMInferenceTrace_code.csv"], None),
    ("mooncake conversation", S8B, ["--input", f"mooncake:{SHARED}/mooncake-fast25/conversation_trace.jsonl"], None),
    ("mooncake synthetic", S8B, ["--input", f"mooncake:{SHARED}/mooncake-fast25/synthetic_trace.jsonl"], None),
    (
        "agent trace fixed-acc",
        S8B,
        ["--input", f"agent-calls:{SHARED}/lmcache-agent-trace/agent_calls.csv", "--session-rate", "0.05",
         "--session-mode", "fixed-accumulate"],
        None,
    ),
    (
        "agent trace closed",
        S8B,
        ["--input", f"agent-calls:{SHARED}/lmcache-agent-trace/agent_calls.csv", "--session-rate", "0.05"],
        None,
    ),
]
KEYS = [("ttft_mean_ms", "TTFT ms"), ("itl_mean_ms", "ITL ms"), ("e2e_mean_ms", "E2E ms"), ("kv_cache_hit_rate", "hit %")]


def run(blis, args):
    return subprocess.run([blis] + args, cwd=ROOT, capture_output=True, text=True)


def close(a, b, key):
    if a == b:
        return True
    if key == "kv_cache_hit_rate":
        return abs(a - b) <= TOLERANCE * max(abs(a), 0.001)
    return abs(a - b) <= TOLERANCE * max(abs(a), abs(b))


def main():
    argv = sys.argv[1:]
    small = "--small" in argv
    argv = [a for a in argv if a != "--small"]
    blis = os.path.abspath(argv[0]) if argv else os.path.join(ROOT, "target/release/blis-sweep")
    cases = CASES + ([] if small else REAL)
    failed = False
    print(f"| workload | {' | '.join(f'{l} run → replay' for _, l in KEYS)} | verdict |")
    print("|---|" + "---|" * (len(KEYS) + 1))
    with tempfile.TemporaryDirectory() as tmp:
        for name, scenario, inputs, spec in cases:
            tr, a, b = (os.path.join(tmp, x) for x in ("tr", "a.json", "b.json"))
            if spec:
                w = os.path.join(tmp, "w.jsonl")
                g = run(blis, ["generate", "--spec", spec, "--seed", "1", "-o", w])
                if g.returncode:
                    print(f"| {name} | generate failed: {g.stderr.strip()} |")
                    failed = True
                    continue
                inputs = [w]
            r = run(blis, ["run", "-s", scenario] + inputs + ["-o", "/dev/null", "--metrics", a, "--trace-output", tr, "-q"])
            warnings = [l for l in r.stderr.splitlines() if "warning" in l]
            if r.returncode:
                why = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
                print(f"| {name} | refused at export: `{why[:150]}` |" + " |" * (len(KEYS) - 1) + " not exportable |")
                failed = True
                continue
            p = run(blis, ["run", "-s", scenario, "--trace-header", tr + ".yaml", "--trace-data", tr + ".csv",
                           "--session-mode", "closed-loop", "--horizon", HORIZON_S,
                           "-o", "/dev/null", "--metrics", b, "-q"])
            if p.returncode:
                print(f"| {name} | replay failed: `{p.stderr.strip()[:150]}` |")
                failed = True
                continue
            ma, mb = json.load(open(a)), json.load(open(b))
            cells, ok, identical = [], True, True
            for key, _ in KEYS:
                x, y = ma[key], mb[key]
                if key == "kv_cache_hit_rate":
                    x, y = 100 * x, 100 * y
                same = close(ma[key], mb[key], key)
                ok &= same
                identical &= ma[key] == mb[key]
                cells.append(f"{x:.2f} → {y:.2f}" + ("" if same else " ✗"))
            verdict = "identical" if identical else "within 0.5 %" if ok else "DIFFERS"
            if warnings:
                verdict += f" (export warned: {warnings[0][:120]})"
            failed |= not ok
            print(f"| {name} | {' | '.join(cells)} | {verdict} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
