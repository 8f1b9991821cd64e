//! What a run of several pools writes: the per-pool block of the metrics
//! JSON and the stderr summary (`blis-sweep run`), and the `nodes` table's
//! `pool`, `role`, `prefill_pool`, `prefill_replica`, `kv_transfer_s` and
//! `kv_transfer_bytes` with the runs table's `kv_transfer_*_ms` (a sweep).
//!
//! The deployments (tests/data/pools/): Llama-3.1-8B on H100 at TP1, one
//! prefill and two decode replicas (the decode pool first in replica
//! order: replicas 0–1 decode, 2 prefill), a KV link of 100 Gbit/s + 50 µs,
//! and 30 single-call requests without token ids (nothing is found in a
//! prefix cache). Llama-3.1-8B's KV in BF16 is 32 layers × 8 KV heads ×
//! 128 dims × 2 (K and V) × 2 bytes = 131,072 bytes a token, so a split
//! call moves `input_tokens` × 131,072 bytes, in at least
//! 50 + ⌈bytes × 8 / 10^5⌉ µs.

use crate::parquet_util::read_columns;
use crate::util::{Dir, TestCommand};

const KV_BYTES_PER_TOKEN: u64 = 32 * 8 * 128 * 2 * 2;

const FILES: [(&str, &str); 6] = [
    ("requests.jsonl", include_str!("../data/pools/requests.jsonl")),
    ("pd.yaml", include_str!("../data/pools/pd.yaml")),
    ("pd-threshold.yaml", include_str!("../data/pools/pd-threshold.yaml")),
    ("mixed.yaml", include_str!("../data/pools/mixed.yaml")),
    ("plan.yaml", include_str!("../data/pools/plan.yaml")),
    ("hetero.yaml", include_str!("../data/pools/hetero.yaml")),
];

fn dir(name: &str) -> Dir {
    let dir = Dir::new(name);
    for (file, text) in FILES {
        dir.create(file, text);
    }
    dir
}

/// Each request's prompt tokens, in input order.
fn prompts() -> Vec<u64> {
    FILES[0]
        .1
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["sub_requests"][0]["input_tokens"].as_u64().unwrap()
        })
        .collect()
}

/// The KV link's time for `bytes` when idle, µs.
fn transfer_us(bytes: u64) -> u64 {
    50 + (bytes * 8).div_ceil(100_000)
}

/// Runs `scenario` with `blis-sweep run`: (metrics JSON, stderr).
fn run(dir: &Dir, scenario: &str) -> (serde_json::Value, String) {
    let out = TestCommand::new(
        &dir.path,
        &["run", "-s", scenario, "requests.jsonl", "-o", "results.jsonl", "--metrics", "metrics.json"],
    )
    .output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (serde_json::from_str(&dir.read("metrics.json")).unwrap(), String::from_utf8(out.stderr).unwrap())
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{v} is not a count"))
}

#[test]
fn a_pd_run_reports_each_pool_and_every_kv_transfer() {
    let dir = dir("pools-run");
    let (m, stderr) = run(&dir, "pd.yaml");
    let prompts = prompts();
    let prompt_tokens: u64 = prompts.iter().sum();
    assert_eq!(u(&m["completed_requests"]), 30);
    let pools = m["pools"].as_array().unwrap();
    let names: Vec<(&str, &str, u64, u64)> = pools
        .iter()
        .map(|p| (p["pool"].as_str().unwrap(), p["role"].as_str().unwrap(), u(&p["replicas"]), u(&p["gpus"])))
        .collect();
    assert_eq!(names, [("prefill", "prefill", 1, 1), ("decode", "decode", 2, 2)]);
    let (prefill, decode) = (&pools[0], &pools[1]);
    // Every call is prefilled on the prefill pool and served by the decode pool.
    assert_eq!(
        (u(&prefill["llm_calls"]), u(&prefill["input_tokens"]), u(&prefill["output_tokens"])),
        (30, prompt_tokens, 0)
    );
    assert_eq!(u(&decode["llm_calls"]), 30);
    assert_eq!(u(&decode["input_tokens"]), prompt_tokens);
    assert_eq!(u(&decode["output_tokens"]), u(&m["total_output_tokens"]));
    // The serving pool's calls are all of them: its TTFT is the run's.
    assert_eq!(decode["ttft_mean_ms"], m["ttft_mean_ms"]);
    assert_eq!(decode["itl_p99_ms"], m["itl_p99_ms"]);
    assert!(prefill["ttft_mean_ms"].is_null() && prefill["itl_mean_ms"].is_null());
    // The engines' counters, split by pool, add up to the run's.
    let steps: u64 = pools.iter().map(|p| u(&p["engine_steps"])).sum();
    assert_eq!(steps, u(&m["engine_steps"]));
    let per_replica: Vec<u64> = m["per_replica"].as_array().unwrap().iter().map(|r| u(&r["engine_steps"])).collect();
    assert_eq!(u(&prefill["engine_steps"]), per_replica[2]);
    assert_eq!(u(&decode["engine_steps"]), per_replica[0] + per_replica[1]);
    // One prefill step a request: they arrive 25 ms apart.
    assert_eq!(u(&prefill["engine_steps"]), 30);
    // 30 transfers of each prompt's KV, the same seen from either end.
    let t = &prefill["kv_transfers"];
    assert_eq!(t, &decode["kv_transfers"]);
    assert_eq!((u(&t["count"]), u(&t["bytes"])), (30, prompt_tokens * KV_BYTES_PER_TOKEN));
    let idle_mean_ms = prompts.iter().map(|&p| transfer_us(p * KV_BYTES_PER_TOKEN)).sum::<u64>() as f64 / 30e3;
    let mean = t["mean_ms"].as_f64().unwrap();
    assert!(mean >= idle_mean_ms - 1e-9, "mean {mean} ms below the idle link's {idle_mean_ms} ms");
    assert_eq!(m["kv_transfer_mean_ms"], t["mean_ms"]);
    assert_eq!(m["kv_transfer_p99_ms"], t["p99_ms"]);
    // Imbalance is over the two decode replicas, not the prefill one.
    let calls: Vec<u64> = m["per_replica"].as_array().unwrap().iter().map(|r| u(&r["requests"])).collect();
    let imbalance = m["imbalance"].as_f64().unwrap();
    assert!((imbalance - calls[0].max(calls[1]) as f64 * 2.0 / 30.0).abs() < 1e-12, "{imbalance} {calls:?}");
    assert!(
        stderr.starts_with(
            "pd: 2 pools (1 prefill + 1 decode) of Llama-3.1-8B, 3 GPUs; KV over 100 Gbit/s + 50 µs a transfer; P/D decider always\n  pool prefill (prefill): 1 replica of 1x H100 (bf16), "
        ),
        "{stderr}"
    );
    assert!(stderr.contains("; 30 llm calls prefilled, 30 KV transfers out ("), "{stderr}");
    assert!(stderr.contains("\n  pool decode (decode): 2 replicas of 1x H100 (bf16), "), "{stderr}");
    assert!(stderr.contains("; 30 llm calls served, TTFT mean "), "{stderr}");
}

#[test]
fn mixed_pools_of_two_gpus_each_report_their_own_calls_and_latencies() {
    let dir = dir("pools-hetero");
    let (m, stderr) = run(&dir, "hetero.yaml");
    let pools = m["pools"].as_array().unwrap();
    let per_replica: Vec<u64> = m["per_replica"].as_array().unwrap().iter().map(|r| u(&r["requests"])).collect();
    // Replicas 0 (H100) and 1–2 (H200), in the order the pools are given.
    let shares: Vec<(&str, &str, u64, u64)> = pools
        .iter()
        .map(|p| (p["pool"].as_str().unwrap(), p["role"].as_str().unwrap(), u(&p["replicas"]), u(&p["llm_calls"])))
        .collect();
    assert_eq!(shares, [("h100", "mixed", 1, per_replica[0]), ("h200", "mixed", 2, per_replica[1] + per_replica[2])]);
    assert_eq!(shares.iter().map(|s| s.3).sum::<u64>(), 30);
    let tokens: u64 = pools.iter().map(|p| u(&p["output_tokens"])).sum();
    assert_eq!(tokens, u(&m["total_output_tokens"]));
    // No prefill pool: no transfers anywhere.
    assert!(pools.iter().all(|p| p.get("kv_transfers").is_none()) && m.get("kv_transfer_mean_ms").is_none());
    // A decode step is memory-bound: H200's 4.8 TB/s beat H100's 3.35 TB/s.
    let itl = |p: &serde_json::Value| p["itl_mean_ms"].as_f64().unwrap();
    assert!(itl(&pools[1]) < itl(&pools[0]), "{pools:?}");
    assert!(
        stderr.starts_with(
            "hetero: 2 pools (2 mixed) of Llama-3.1-8B, 3 GPUs\n  pool h100 (mixed): 1 replica of 1x H100"
        ),
        "{stderr}"
    );
}

#[test]
fn a_run_of_one_pool_has_no_pool_block() {
    let dir = dir("pools-none");
    let (m, stderr) = run(&dir, "mixed.yaml");
    let keys: Vec<&str> = m.as_object().unwrap().keys().map(String::as_str).collect();
    for key in ["pools", "kv_transfer_mean_ms", "kv_transfer_p99_ms"] {
        assert!(!keys.contains(&key), "{key} in {keys:?}");
    }
    assert!(stderr.starts_with("mixed: 3 replicas ("), "{stderr}");
}

#[test]
fn the_nodes_table_names_each_calls_pools_and_its_transfer() {
    let dir = dir("pools-sweep");
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    let prompts = prompts();
    let mut seen = Vec::new();
    for e in std::fs::read_dir(dir.join("out/nodes")).unwrap() {
        let path = e.unwrap().path();
        let cols = [
            "scenario",
            "request_index",
            "input_tokens",
            "cached_tokens",
            "replica",
            "pool",
            "role",
            "prefill_pool",
            "prefill_replica",
            "kv_transfer_s",
            "kv_transfer_bytes",
            "error",
        ];
        let rows = read_columns(&path, &cols);
        assert_eq!(rows.len(), 30);
        let scenario = rows[0][0].clone();
        let mut split = 0;
        for r in &rows {
            let (index, input, cached): (usize, u64, u64) =
                (r[1].parse().unwrap(), r[2].parse().unwrap(), r[3].parse().unwrap());
            assert_eq!((input, cached, r[11].as_str()), (prompts[index], 0, "null"), "{r:?}");
            let replica: u32 = r[4].parse().unwrap();
            let serving = (r[5].as_str(), r[6].as_str());
            let pd = [r[7].as_str(), r[8].as_str(), r[9].as_str(), r[10].as_str()];
            match scenario.as_str() {
                "mixed" => {
                    assert!(replica < 3);
                    assert_eq!((serving, pd), (("default", "mixed"), ["null"; 4]), "{r:?}");
                }
                "pd" | "pd-threshold" => {
                    assert!(replica < 2, "{r:?}: the decode replicas are 0 and 1");
                    assert_eq!(serving, ("decode", "decode"), "{r:?}");
                    // llm-d's decider: prefilled remotely from 500 uncached tokens.
                    if scenario == "pd" || input >= 500 {
                        split += 1;
                        assert_eq!(pd[..2], ["prefill", "2"], "{r:?}");
                        let bytes: u64 = pd[3].parse().unwrap();
                        assert_eq!(bytes, input * KV_BYTES_PER_TOKEN, "{r:?}");
                        let us = (pd[2].parse::<f64>().unwrap() * 1e6).round() as u64;
                        assert!(us >= transfer_us(bytes), "{r:?}: {us} µs < the idle link's {}", transfer_us(bytes));
                    } else {
                        assert_eq!(pd, ["null"; 4], "{r:?}");
                    }
                }
                other => panic!("scenario {other}"),
            }
        }
        seen.push((scenario, split));
    }
    seen.sort();
    let long = prompts.iter().filter(|&&p| p >= 500).count();
    assert!(long > 0 && long < 30, "the workload has prompts on both sides of the threshold");
    let expected = [("mixed".to_owned(), 0), ("pd".to_owned(), 30), ("pd-threshold".to_owned(), long)];
    assert_eq!(seen, expected);
    // The runs table: the transfers' time for the P/D runs, null without one.
    let runs = read_columns(&dir.join("out/runs.parquet"), &["scenario", "kv_transfer_mean_ms", "kv_transfer_p99_ms"]);
    for r in runs {
        match r[0].as_str() {
            "mixed" => assert_eq!(r[1..], ["null", "null"]),
            _ => {
                let (mean, p99): (f64, f64) = (r[1].parse().unwrap(), r[2].parse().unwrap());
                assert!(mean > 0.05 && p99 >= mean, "{r:?}");
            }
        }
    }
}
