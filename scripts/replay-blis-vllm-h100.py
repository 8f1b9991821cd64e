#!/usr/bin/env python3
"""Replays the real vLLM runs of ../shared/data/blis-vllm-h100 through `blis-sweep run` and prints a
markdown table of mean TTFT / ITL / E2E, real against simulated, whole run.

    cargo build --release && python3 scripts/replay-blis-vllm-h100.py [../shared]

Stop-gap until `blis-sweep convert` and `calibrate` (issue #4) exist. Follows the data README: output
length = the profile's `output_len` (the recorded counts are unreliable), rows with `has_error` skipped,
per-request ITL = (e2e - ttft) / (output_len - 1). Which shared system prompt a request used is not
recorded, so no token ids are given (prefix caching cannot help the simulation).
"""
import csv
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared"
DATA = SHARED / "data" / "blis-vllm-h100"
BIN = ROOT / "target" / "release" / "blis-sweep"


def main():
    print("| experiment | TTFT real / sim (ms) | err | ITL real / sim (ms) | err | E2E real / sim (ms) | err |")
    print("|---|---|---|---|---|---|---|")
    with open(DATA / "experiments.csv") as f:
        experiments = list(csv.DictReader(f))
    for exp in experiments:
        out_len = int(exp["output_len"])
        with open(DATA / "requests" / f"{exp['experiment']}.csv") as f:
            rows = [r for r in csv.DictReader(f) if r["has_error"] == "0"]
        scenario = (
            f"name: {exp['experiment']}\nmodel: {exp['model']}\nhardware: H100\ntp: {exp['tensor_parallelism']}\n"
            f"dtype: fp16\nengine:\n  max_num_seqs: {exp['max_num_seqs']}\n"
            f"  max_num_batched_tokens: {exp['max_num_batched_tokens']}\n  max_model_len: {exp['max_model_len']}\n"
            f"  num_gpu_blocks: {exp['kv_blocks_total_gpu']}\n  block_size: {exp['block_size']}\n"
        )
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            (tmp / "s.yaml").write_text(scenario)
            with open(tmp / "w.jsonl", "w") as w:
                for r in rows:
                    w.write(json.dumps({
                        "request_id": int(r["index"]), "arrival_time": int(r["arrival_time_us"]) / 1e6,
                        "initial": [0], "sub_requests": [{"kind": "llm", "input_tokens": int(r["input_tokens"]),
                                                          "output_tokens": out_len, "next": []}]}) + "\n")
            subprocess.run([BIN, "run", "-q", "-s", tmp / "s.yaml", tmp / "w.jsonl", "-o", tmp / "r.jsonl"],
                           check=True, stdout=subprocess.DEVNULL)
            sim = [json.loads(l)["sub_requests"][0]["token_latency"] for l in open(tmp / "r.jsonl")]
        real_ttft = statistics.mean(float(r["ttft_s"]) for r in rows) * 1e3
        real_e2e = statistics.mean(float(r["e2e_s"]) for r in rows) * 1e3
        real_itl = statistics.mean((float(r["e2e_s"]) - float(r["ttft_s"])) / (out_len - 1) for r in rows) * 1e3
        sim_ttft = statistics.mean(t[0] for t in sim) * 1e3
        sim_e2e = statistics.mean(sum(t) for t in sim) * 1e3
        sim_itl = statistics.mean(statistics.mean(t[1:]) for t in sim) * 1e3
        err = lambda s, r: f"{(s - r) / r * 100:+.0f} %"
        print(f"| {exp['experiment']} | {real_ttft:.1f} / {sim_ttft:.1f} | {err(sim_ttft, real_ttft)} "
              f"| {real_itl:.2f} / {sim_itl:.2f} | {err(sim_itl, real_itl)} "
              f"| {real_e2e:.0f} / {sim_e2e:.0f} | {err(sim_e2e, real_e2e)} |")


if __name__ == "__main__":
    main()
