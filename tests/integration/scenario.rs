//! Scenario files: YAML and JSON, `model_config` paths relative to the file,
//! the embedded catalogs, and refusals that name the file, line and key.

use crate::util::{Dir, TestCommand};

const ONE: &str = r#"{"request_id": 0, "arrival_time": 0.0, "initial": [0], "sub_requests": [{"kind": "llm", "input_tokens": 100, "output_tokens": 4, "next": []}]}"#;

fn summary(dir: &Dir, scenario: &str) -> String {
    dir.create("w.jsonl", &format!("{ONE}\n"));
    let out = TestCommand::new(&dir.path, &["run", "-s", scenario, "w.jsonl"]).output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn json_scenarios_and_relative_model_configs_work() {
    let dir = Dir::new("scenario-json");
    std::fs::create_dir_all(dir.join("scenarios")).unwrap();
    std::fs::create_dir_all(dir.join("configs")).unwrap();
    let config = include_str!("../../src/arch/catalog/models/Qwen3-14B.json");
    dir.create("configs/my-model.json", config);
    dir.create(
        "scenarios/s.json",
        r#"{"name": "mine", "model_config": "../configs/my-model.json", "hardware": "A100-SXM", "tp": 2, "dtype": "bf16"}"#,
    );
    let s = summary(&dir, "scenarios/s.json");
    assert!(s.starts_with("mine: ../configs/my-model.json on 2x A100-80G (bf16)"), "{s}");
}

#[test]
fn every_catalog_gpu_and_model_resolves() {
    let dir = Dir::new("scenario-catalog");
    for gpu in ["H100", "H100-SXM", "H200", "A100-80G", "A100-SXM", "L40S", "B200", "RTX4090", "RTXPRO6000"] {
        dir.create("s.yaml", &format!("model: Qwen2.5-7B\nhardware: {gpu}\n"));
        assert!(summary(&dir, "s.yaml").contains("Qwen2.5-7B on 1x"), "{gpu}");
    }
    for (model, tp) in [
        ("Llama-2-7b", 1),
        ("Llama-2-70b", 4),
        ("CodeLlama-34b", 2),
        ("Llama-3.1-8B", 1),
        ("Llama-3.1-70B", 4),
        ("Mixtral-8x7B", 2),
        ("Qwen2.5-7B", 1),
        ("Qwen3-14B", 1),
        ("Qwen3-32B", 2),
        ("Qwen3-30B-A3B", 1),
        ("DeepSeek-V2-Lite", 1),
        ("Mistral-Nemo-12B", 1),
        ("Yi-34B", 2),
    ] {
        dir.create("s.yaml", &format!("model: {model}\nhardware: H100\ntp: {tp}\n"));
        assert!(summary(&dir, "s.yaml").contains(&format!("{model} on {tp}x H100")), "{model}");
    }
}

#[test]
fn refusals_name_the_file_line_and_key() {
    let dir = Dir::new("scenario-bad");
    dir.create("w.jsonl", &format!("{ONE}\n"));
    for (yaml, expected) in [
        (
            "model: Llama-2-7b\nhardware: RTX4090\nlatency_model: {kind: kernels}\n",
            "s.yaml:3: latency_model: no measured kernel tables for RTX4090",
        ),
        (
            "model: Llama-2-7b\nhardware: L40S\ndtype: fp8\nlatency_model: {kind: kernels}\n",
            "s.yaml:4: latency_model: no measured fp8 GEMMs on L40S: its tables hold BF16 only",
        ),
        (
            "model: Llama-2-7b\nhardware: H100\nlatency_model: {kind: kernels, constants: {gemm_scale: 0}}\n",
            "s.yaml:3: latency_model.constants: gemm_scale",
        ),
        (
            "model: Llama-2-7b\nhardware: H100\nlatency_model: trained-physics\n",
            "s.yaml:3: latency_model: `trained-physics` is not implemented",
        ),
        ("model: Llama-2-7b\nhardware: TPU\n", "s.yaml:2: hardware: unknown GPU `TPU`"),
        ("hardware: H100\ndtype: fp16\n", "s.yaml:1: model: missing"),
        (
            "model: Llama-2-7b\nhardware: H100\nengine:\n  gpu_memory_utilization: 1.5\n",
            "s.yaml:4: engine.gpu_memory_utilization",
        ),
        ("model: Llama-2-7b\nhardware: H100\ndtype: int4\n", "s.yaml:3"),
        ("model: Llama-2-7b\nmodel: Llama-2-70b\nhardware: H100\n", "s.yaml:2"),
    ] {
        dir.create("s.yaml", yaml);
        let err = TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "w.jsonl"]).fails();
        assert!(err.starts_with(&format!("blis-sweep: {expected}")), "{yaml}\n{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// `N KV blocks of B` and the latency model from a run's summary line.
fn blocks_and_model(summary: &str) -> (u64, String) {
    let line = summary.lines().next().unwrap();
    let (head, tail) = line.split_once(" KV blocks of ").unwrap();
    let blocks = head.rsplit(' ').next().unwrap().parse().unwrap();
    // (The model is followed by why it was chosen, in parentheses.)
    let model = tail.split_once(", ").unwrap().1.split(" latency model").next().unwrap().to_owned();
    (blocks, model)
}

#[test]
fn an_fp8_kv_cache_holds_twice_the_blocks() {
    let dir = Dir::new("scenario-fp8-kv");
    dir.create("auto.yaml", "model: Llama-3.1-8B\nhardware: H100\nlatency_model: roofline\n");
    dir.create(
        "fp8.yaml",
        "model: Llama-3.1-8B\nhardware: H100\nlatency_model: roofline\nengine: {kv_cache_dtype: fp8}\n",
    );
    let (auto, _) = blocks_and_model(&summary(&dir, "auto.yaml"));
    let (fp8, _) = blocks_and_model(&summary(&dir, "fp8.yaml"));
    // The same free memory in blocks of half the bytes (to the block).
    assert!(fp8 == 2 * auto || fp8 == 2 * auto + 1, "{auto} -> {fp8}");
    // The kernel tables hold 16-bit KV only: by default the roofline prices
    // it, and asking for the kernels says why not.
    dir.create("default.yaml", "model: Llama-3.1-8B\nhardware: H100\nengine: {kv_cache_dtype: fp8}\n");
    assert_eq!(blocks_and_model(&summary(&dir, "default.yaml")).1, "roofline");
    dir.create(
        "kernels.yaml",
        "model: Llama-3.1-8B\nhardware: H100\nlatency_model: kernels\nengine: {kv_cache_dtype: fp8}\n",
    );
    let err = TestCommand::new(&dir.path, &["run", "-s", "kernels.yaml", "w.jsonl"]).fails();
    assert!(
        err.contains("kernels.yaml:3: latency_model: no measured attention kernels over an FP8 KV cache")
            && err.contains("set latency_model: {kind: roofline}"),
        "{err}"
    );
}

#[test]
fn latent_attention_is_sized_per_gpu_and_priced_by_the_roofline() {
    let dir = Dir::new("scenario-mla");
    // DeepSeek-V2-Lite keeps 31,104 bytes a token (27 layers × 576 × 2) on
    // every GPU: 1,000 blocks of 16 are 497.7 MB whatever the TP degree,
    // so a count past one H100's 80 GiB names that size.
    dir.create("s.yaml", "model: DeepSeek-V2-Lite\nhardware: H100\ntp: 2\nengine: {num_gpu_blocks: 200000}\n");
    dir.create("w.jsonl", &format!("{ONE}\n"));
    let err = TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "w.jsonl"]).fails();
    // 200,000 × 16 × 31,104 B = 92.7 GiB.
    assert!(err.contains("engine.num_gpu_blocks: 200000 blocks of 16 tokens need 92.7 GiB per GPU"), "{err}");
    dir.create("s.yaml", "model: DeepSeek-V2-Lite\nhardware: H100\ntp: 2\n");
    let (blocks, model) = blocks_and_model(&summary(&dir, "s.yaml"));
    assert_eq!(model, "roofline");
    assert!(blocks > 100_000, "{blocks}");
    dir.create("k.yaml", "model: DeepSeek-V2-Lite\nhardware: H100\nlatency_model: kernels\n");
    let err = TestCommand::new(&dir.path, &["run", "-s", "k.yaml", "w.jsonl"]).fails();
    assert!(err.contains("k.yaml:3: latency_model: no measured latent-attention (MLA) kernels"), "{err}");
}
