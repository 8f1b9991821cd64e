//! The engine features in a sweep's runs table: a column per headline
//! number (KV offload's hit rates, speculative decoding's acceptance, LoRA
//! adapter loads), filled where the run has the feature and null where it
//! has not, so DuckDB compares them across a grid.

use crate::parquet_util::read_columns;
use crate::util::{Dir, LINEAR_SCENARIO, TestCommand};

const CHAT: &str = include_str!("../../sweeps/workloads/chat-200.jsonl");

#[test]
fn the_runs_table_carries_each_features_numbers_and_null_without_it() {
    let dir = Dir::new("feature-tables");
    dir.create("s.yaml", &LINEAR_SCENARIO.replace("engine:\n", "engine:\n  async_scheduling: false\n"));
    dir.create("w.jsonl", CHAT);
    dir.create(
        "plan.yaml",
        "name: t\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\ngrid:\n  overrides:\n    \
         engine.speculative: [null, {method: ngram, k: 2, rate: 0.5}]\n    \
         engine.kv_offload: [null, {cpu_gib: 1}]\n    \
         engine.lora: [null, {max_loras: 2}]\noutput: out\n",
    );
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    let cols = [
        "overrides",
        "completed_requests",
        "kv_offload_hit_rate",
        "kv_offload_cpu_hit_rate",
        "spec_decode_acceptance_rate",
        "spec_decode_mean_acceptance_length",
        "lora_adapter_loads_from_cpu",
        "lora_adapter_loads_from_disk",
    ];
    let runs = read_columns(&dir.join("out/runs.parquet"), &cols);
    assert_eq!(runs.len(), 8);
    for r in &runs {
        assert_eq!(r[1], "200", "{r:?}");
        let null = |i: usize| r[i] == "null";
        let on = |key: &str| r[0].contains(&format!("\"engine_{key}\":{{"));
        assert_eq!((null(2), null(3)), (!on("kv_offload"), !on("kv_offload")), "{r:?}");
        assert_eq!((null(4), null(5)), (!on("speculative"), !on("speculative")), "{r:?}");
        assert_eq!((null(6), null(7)), (!on("lora"), !on("lora")), "{r:?}");
        if on("speculative") {
            // Rate 0.5, two drafts: α = 0.5, 0.25, so 1 + 0.5 + 0.25 tokens a verification.
            let rate: f64 = r[4].parse().unwrap();
            let length: f64 = r[5].parse().unwrap();
            assert!((rate - 0.375).abs() < 0.05 && (length - 1.75).abs() < 0.1, "{r:?}");
        }
    }
}
