//! `run` on scenarios with `pools:` (tests/data/pools-scenarios/):
//! heterogeneous mixed pools behind one router (each pool's GPU sizes its
//! replicas' KV caches and prices their steps), a prefill/decode cluster end
//! to end, and every mistake in `pools:`, `kv_transfer:` and `pd:` named by
//! file, line and key with exit 2 and nothing written.

use std::path::Path;

use crate::util::{Dir, TestCommand, rows};

const CHAT: &str = include_str!("../../sweeps/workloads/chat-200.jsonl");

/// A scenario of tests/data/pools-scenarios/, copied into `dir`.
fn scenario(dir: &Dir, name: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pools-scenarios").join(name);
    dir.create(name, &std::fs::read_to_string(path).unwrap());
}

#[test]
fn heterogeneous_mixed_pools_both_serve_each_on_its_own_gpu() {
    let dir = Dir::new("pools-hetero");
    scenario(&dir, "hetero-h100-h200.yaml");
    dir.create("w.jsonl", &CHAT.lines().take(80).map(|l| format!("{l}\n")).collect::<String>());
    // Each pool resolves on its own GPU: the H200's 141 GB hold more KV.
    let d = blis_sweep::scenario::load(&dir.join("hetero-h100-h200.yaml")).unwrap();
    let blocks: Vec<(&str, u32)> = d.pools.iter().map(|p| (p.gpu.name, p.engine.num_gpu_blocks)).collect();
    assert_eq!(blocks.iter().map(|b| b.0).collect::<Vec<_>>(), ["H100", "H200"]);
    assert!(blocks[1].1 > blocks[0].1 * 3 / 2, "KV blocks per pool: {blocks:?}");
    let order: Vec<&str> = d.replica_pools().iter().map(|p| p.name.as_str()).collect();
    assert_eq!(order, ["h100", "h100", "h200", "h200"]);
    let args = ["run", "-q", "-s", "hetero-h100-h200.yaml", "w.jsonl", "--rate-scale", "20", "-o", "r.jsonl"];
    TestCommand::new(&dir.path, &[&args[..], &["--step-trace", "t.jsonl"]].concat()).stdout();
    // One router in front of all four: every replica serves.
    let served: Vec<u64> =
        rows(&dir.read("r.jsonl")).iter().map(|r| r["sub_requests"][0]["replica"].as_u64().unwrap()).collect();
    assert_eq!(served.len(), 80);
    for r in 0..4 {
        assert!(served.contains(&r), "replica {r} served nothing: {served:?}");
    }
    // The same batch (one request decoding one token: the weights' read
    // dominates) is priced by each pool's GPU: faster on the H200's HBM3e.
    let mut one_decode: [Vec<u64>; 4] = Default::default();
    for step in rows(&dir.read("t.jsonl")) {
        let scheduled = step["scheduled"].as_array().unwrap();
        if scheduled.len() == 1 && scheduled[0]["tokens"] == 1 {
            one_decode[step["replica"].as_u64().unwrap() as usize].push(step["duration_us"].as_u64().unwrap());
        }
    }
    let h100 = one_decode[..2].iter().flatten().copied();
    let h200 = one_decode[2..].iter().flatten().copied();
    let (h100_fastest, h200_slowest) = (h100.min().unwrap(), h200.max().unwrap());
    assert!(h200_slowest < h100_fastest, "H200 {h200_slowest} µs vs H100 {h100_fastest} µs");
}

#[test]
fn a_prefill_decode_cluster_serves_every_request_from_its_decode_pool() {
    let dir = Dir::new("pools-pd");
    scenario(&dir, "pd-4p4d-llama-3.1-8b-h100.yaml");
    dir.create("w.jsonl", &CHAT.lines().take(60).map(|l| format!("{l}\n")).collect::<String>());
    let d = blis_sweep::scenario::load(&dir.join("pd-4p4d-llama-3.1-8b-h100.yaml")).unwrap();
    assert_eq!(d.gpus(), 8);
    let args = ["run", "-q", "-s", "pd-4p4d-llama-3.1-8b-h100.yaml", "w.jsonl", "--rate-scale", "20"];
    TestCommand::new(&dir.path, &[&args[..], &["-o", "r.jsonl", "--metrics", "m.json"]].concat()).stdout();
    let m: serde_json::Value = serde_json::from_str(&dir.read("m.json")).unwrap();
    assert_eq!(m["completed_requests"], 60);
    // Serving replicas come first: the decode pool's 0–3 answer every request.
    for row in rows(&dir.read("r.jsonl")) {
        let replica = row["sub_requests"][0]["replica"].as_u64().unwrap();
        assert!(replica < 4, "answered by replica {replica}");
    }
}

#[test]
fn pool_mistakes_name_file_line_and_key() {
    let cases = [
        ("bad-unknown-role.yaml", "7: pools.decode.role: unknown role `decoder`; use mixed, prefill, decode"),
        ("bad-decode-without-prefill.yaml", "5: pools: a decode pool needs a prefill pool to send its requests to"),
        (
            "bad-two-routers.yaml",
            "10: pools.h200.router: differs from pool `h100`'s: the serving (mixed and decode) pools stand behind \
             one router; give it once (or once at the top level)",
        ),
        (
            "bad-dp-in-pool.yaml",
            "9: pools.decode.dp: dp > 1 inside a pool is not modelled; give the pool replicas instead",
        ),
        ("bad-kv-transfer-without-prefill.yaml", "7: kv_transfer: only a deployment with a prefill pool moves KV"),
        (
            "bad-unknown-interconnect.yaml",
            "9: kv_transfer.interconnect: unknown interconnect `infiniband`; use nvlink or rdma",
        ),
        (
            "bad-prefix-threshold-without-tokens.yaml",
            "8: pd.threshold_tokens: missing: the uncached prompt tokens from which a prompt is prefilled remotely",
        ),
        // The decode pool's own engine key, not the top level's or the prefill pool's.
        ("bad-decode-max-num-seqs.yaml", "15: pools.decode.engine.max_num_seqs: must be positive"),
    ];
    let dir = Dir::new("pools-bad");
    dir.create("w.jsonl", &CHAT.lines().take(3).map(|l| format!("{l}\n")).collect::<String>());
    for (file, error) in cases {
        scenario(&dir, file);
        let err = TestCommand::new(&dir.path, &["run", "-q", "-s", file, "w.jsonl", "-o", "r.jsonl"]).fails();
        assert_eq!(err, format!("blis-sweep: {file}:{error}\n"), "{file}");
        assert!(!dir.join("r.jsonl").exists(), "{file}: output written");
    }
}
