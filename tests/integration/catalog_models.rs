//! The models and GPUs of issue 32, each run on the quickstart workload
//! (`sweeps/workloads/chat-200.jsonl`) for one deployment: the weights per
//! GPU and the KV capacity the run reports equal a hand computation within
//! 2 %, and the KV cache groups are vLLM's.
//!
//! The hand computation is `scripts/catalog-hand-check.py` (Python, apart
//! from the simulator's code): parameters counted from each `config.json`
//! (embeddings, attention or Gated DeltaNet layers, dense MLPs, experts, a
//! vision tower), 2 bytes a weight (FP8: 1, the embeddings and LM head 2;
//! MXFP4 experts 4.25 bits), split over TP; then vLLM's profile:
//! `memory × 0.9 − weights − peak activation − 0.67 GiB − NCCL`, over a
//! block of `group_size` layers' pages (vLLM's grouping of layer kinds;
//! Qwen3-Next's block raised to hold a Gated DeltaNet state). Its parameter
//! counts meet the published ones: gpt-oss 20.9 B / 116.8 B (21 B / 117 B),
//! Gemma 3 4.30 / 12.19 / 27.43 B, Mistral-7B 7.24 B, Llama 4 Scout 108.6 B
//! (109 B) and Maverick 401.5 B (400 B), Qwen3-Next 79.7 B without its MTP
//! layer (80 B), DeepSeek-V3 671.0 B, MiniMax-M2.5 228.7 B (230 B), Kimi-K2.5
//! 1,026.8 B (about 1 T; its INT4 experts 4.5 bits with their scales).

use crate::util::{Dir, TestCommand};

/// (model, GPU, TP, dtype, weights GiB per GPU, KV blocks, block size, groups)
/// — the hand computation's numbers.
type Deployment = (&'static str, &'static str, u32, &'static str, f64, u64, u32, &'static str);

const DEPLOYMENTS: [Deployment; 12] = [
    ("gpt-oss-20b", "H100", 1, "bf16", 12.80, 155_415, 16, "2 groups of 12 layers (1 sliding window 128, 1 full)"),
    ("gpt-oss-120b", "H100", 1, "bf16", 60.69, 16_430, 16, "2 groups of 18 layers (1 sliding window 128, 1 full)"),
    ("gemma-3-4b-it", "L40S", 1, "bf16", 8.01, 103_033, 16, "7 groups of 5 layers (6 sliding window 1024, 1 full)"),
    ("gemma-3-12b-it", "H100", 1, "bf16", 22.70, 47_728, 16, "6 groups of 8 layers (5 sliding window 1024, 1 full)"),
    ("gemma-3-27b-it", "H200", 1, "bf16", 51.10, 59_483, 16, "7 groups of 10 layers (6 sliding window 1024, 1 full)"),
    ("Mistral-7B-v0.1", "A100-80G", 1, "bf16", 13.49, 29_511, 16, "1 group of 32 layers (1 sliding window 4096)"),
    (
        "Llama-4-Scout-17B-16E-Instruct",
        "H100",
        4,
        "bf16",
        50.57,
        103_287,
        16,
        "4 groups of 12 layers (3 chunked local 8192, 1 full)",
    ),
    (
        "Llama-4-Maverick-17B-128E-Instruct",
        "H200",
        8,
        "fp8",
        46.99,
        843_308,
        16,
        "4 groups of 12 layers (3 chunked local 8192, 1 full)",
    ),
    ("Qwen3-Next-80B-A3B-Instruct", "H100", 4, "bf16", 37.10, 10_532, 272, "4 groups of 12 layers (3 linear, 1 full)"),
    ("DeepSeek-V3", "H200", 8, "fp8_block", 78.33, 43_911, 16, ""),
    ("MiniMax-M2.5", "H200", 4, "fp8_block", 53.53, 74_765, 16, ""),
    ("Kimi-K2.5", "H200", 8, "bf16", 69.27, 52_439, 16, ""),
];

/// `X GiB of weights per GPU, N KV blocks of B[ in …]` from a run's summary.
fn reported(summary: &str) -> (f64, u64, u32, String) {
    let line = summary.lines().next().unwrap();
    let (head, rest) = line.split_once(" GiB of weights per GPU, ").unwrap();
    let weights = head.rsplit(' ').next().unwrap().parse().unwrap();
    let (blocks, rest) = rest.split_once(" KV blocks of ").unwrap();
    let (size, rest) = rest.split_once(|c: char| !c.is_ascii_digit()).unwrap();
    let groups = rest.strip_prefix("in ").map_or("", |g| g.split_once("), ").map_or(g, |(g, _)| g)).to_owned();
    let groups = if groups.is_empty() { groups } else { format!("{groups})") };
    (weights, blocks.parse().unwrap(), size.parse().unwrap(), groups)
}

#[test]
fn new_catalog_models_report_the_hand_computed_weights_and_kv_capacity() {
    let dir = Dir::new("catalog-models");
    let workload = concat!(env!("CARGO_MANIFEST_DIR"), "/sweeps/workloads/chat-200.jsonl");
    for (model, gpu, tp, dtype, weights, blocks, block_size, groups) in DEPLOYMENTS {
        dir.create("s.yaml", &format!("model: {model}\nhardware: {gpu}\ntp: {tp}\ndtype: {dtype}\n"));
        let out = TestCommand::new(&dir.path, &["run", "-s", "s.yaml", workload, "-o", "r.jsonl"]).output();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{model}: {err}");
        assert!(err.contains("200 requests: 200 completed"), "{model}: {err}");
        let (w, b, bs, g) = reported(&err);
        assert!((w / weights - 1.0).abs() <= 0.02, "{model}: {w} GiB of weights, by hand {weights}");
        assert!((b as f64 / blocks as f64 - 1.0).abs() <= 0.02, "{model}: {b} blocks, by hand {blocks}");
        assert_eq!((bs, g.as_str()), (block_size, groups), "{model}");
    }
}
