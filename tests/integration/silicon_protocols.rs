//! aiconfigurator's measured deployments replayed under the protocol that
//! measured each (`src/workload/import/silicon.rs`): warm-ups that the
//! harness awaits leave the measured means as they were, the calibration
//! report sums each protocol up and flags rows whose KV cache the load
//! exhausts, and a scenario picks the FP8 GEMMs of its engine's release.

use crate::parquet_util::read_columns;
use crate::util::{Dir, TestCommand};

const HEADER: &str = "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,batch_size,tp_size,silicon_ttft_ms,silicon_tpot_ms\n";

/// The same InferenceX benchmark (Llama-3.1-70B FP8, two H200s, four users,
/// 1k/1k) measured before and after the harness gained warm-ups.
const BEFORE_AND_AFTER: &str = concat!(
    "a,source_file=2026-04-06.csv; silicon_concurrency=4; measured=2025-10-29T00:00:00.000Z,vllm,,meta-llama/Llama-3.1-70B,h200_sxm,fp8,agg,1024,1024,4,2,120,20\n",
    "b,source_file=2026-04-06.csv; silicon_concurrency=4; measured=2026-03-01T00:00:00.000Z,vllm,,meta-llama/Llama-3.1-70B,h200_sxm,fp8,agg,1024,1024,4,2,120,20\n",
);

fn plan(dir: &Dir, rows: &str, out: &str) -> Vec<Vec<String>> {
    std::fs::create_dir_all(dir.join("data")).unwrap();
    dir.create("data/silicon_sample.csv", &format!("{HEADER}{rows}"));
    dir.create("plan.yaml", &format!("name: s\ncalibration:\n  - {{source: silicon, data: data}}\noutput: {out}\n"));
    TestCommand::new(&dir.path, &["-q", "--no-report", "--force", "plan.yaml"]).stdout();
    read_columns(&dir.join(&format!("{out}/calibration.parquet")), &["experiment", "metric", "simulated_ms", "pairs"])
}

/// InferenceX awaits every warm-up before its first measured request: the
/// server is then empty and (prefix caching off) holds nothing a measured
/// prompt hits, so the measured requests replay as if there had been no
/// warm-ups — and only they are scored: 10 × 4 of them, not 12 × 4.
#[test]
fn warmups_behind_the_barrier_are_not_scored_and_change_nothing() {
    let dir = Dir::new("silicon-warmups");
    let rows = plan(&dir, BEFORE_AND_AFTER, "out");
    let of = |line: u32| -> Vec<(String, String, String)> {
        rows.iter()
            .filter(|r| r[0].ends_with(&format!("-line{line}")))
            .map(|r| (r[1].clone(), r[2].clone(), r[3].clone()))
            .collect()
    };
    let (before, after) = (of(2), of(3));
    assert_eq!(before.len(), 2, "{rows:?}");
    assert_eq!(before, after);
    assert!(before.iter().all(|(_, _, pairs)| pairs == "40"), "{before:?}");
    // Both are class A in the report.
    let md = dir.read("out/calibration.md");
    assert!(md.contains("/ TP2 / kernels / A |"), "{md}");
}

#[test]
fn the_report_sums_up_each_protocol_and_scores_capacity_rows_on_ttft() {
    let dir = Dir::new("silicon-classes");
    let rows = concat!(
        // A: InferenceX.
        "a,source_file=2026-04-06.csv; silicon_concurrency=4; measured=2025-10-29T00:00:00.000Z,vllm,,meta-llama/Llama-3.1-70B,h200_sxm,fp8,agg,1024,128,4,4,120,20\n",
        // B: AIC's gap analysis, light load.
        "b,source_file=/u/aic-auto-gap-analysis/data/h100_sxm/vllm/0.12.0/Qwen_Qwen3-32B.csv; silicon_concurrency=4,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,,agg,256,16,4,2,60,25\n",
        // B, 128 prompts of 4,096 tokens on two H100s: more KV than the cache holds.
        "c,source_file=/u/aic-auto-gap-analysis/data/h100_sxm/vllm/0.12.0/Qwen_Qwen3-32B.csv; silicon_concurrency=128,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,,agg,4096,8,128,2,18957,40\n",
        // C: a Dynamo job.
        "d,source_file=/u/aic-auto-gap-analysis/data/h100_sxm/vllm/0.12.0/qwen3_32b.csv; measured=2026-01-23; image=nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.8.0; dynamo_version=0.8.0,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,,agg,256,16,4,2,60,25\n",
    );
    plan(&dir, rows, "out");
    let md = dir.read("out/calibration.md");
    assert!(md.contains("### Measured deployments by protocol"), "{md}");
    for line in [
        "| A | Llama-3.1-70B fp8 H200 | 1 |",
        "| B | Qwen3-32B bf16 H100 | 1 |",
        "| C | Qwen3-32B bf16 H100 | 1 |",
        // The target's rows: A and B, not the capacity row, not C.
        "| A+B | **the TPOT target's rows**",
    ] {
        assert!(md.contains(line), "{line}\n{md}");
    }
    assert!(
        md.contains(
            "the TPOT target's rows** (known protocol, not capacity, H100/H200 kernel tables; target median ≤ 5 %, p90 ≤ 10 %) | 2 |"
        ),
        "{md}"
    );
    assert!(md.contains("/ TP2 / kernels / B capacity |"), "{md}");
    assert!(md.contains("| H100-Qwen3-32B-tp2-bf16-4096x8-c128-line4 | B | 18957 ms |"), "{md}");
}

#[test]
fn a_scenario_prices_fp8_on_its_release_and_gets_a_clear_error_where_none_was_measured() {
    let dir = Dir::new("silicon-fp8-release");
    let workload: String =
        include_str!("../../sweeps/workloads/chat-200.jsonl").lines().take(20).map(|l| format!("{l}\n")).collect();
    dir.create("w.jsonl", &workload);
    let scenario = |gpu: &str, release: &str| {
        format!("model: Llama-3.1-70B\nhardware: {gpu}\ntp: 4\ndtype: fp8\nfp8_gemm_release: \"{release}\"\n")
    };
    let e2e = |name: &str| -> f64 {
        let args = ["run", "-q", "-s", name, "w.jsonl", "-o", "r.jsonl", "--metrics", "m.json"];
        TestCommand::new(&dir.path, &args).stdout();
        let m: serde_json::Value = serde_json::from_str(&dir.read("m.json")).unwrap();
        m["e2e_mean_ms"].as_f64().unwrap_or_else(|| panic!("{m}"))
    };
    dir.create("old.yaml", &scenario("H100", "0.14"));
    dir.create("new.yaml", &scenario("H100", "0.24"));
    let (old, new) = (e2e("old.yaml"), e2e("new.yaml"));
    assert!(old > new, "vLLM 0.14's FP8 GEMMs are slower: {old} vs {new}");
    dir.create("h200.yaml", &scenario("H200", "0.14"));
    let err = TestCommand::new(&dir.path, &["run", "-q", "-s", "h200.yaml", "w.jsonl", "-o", "x.jsonl"]).fails();
    assert!(err.contains("h200.yaml") && err.contains("fp8_gemm_release") && err.contains("H200"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    dir.create("bad.yaml", &scenario("H100", "0.12"));
    let err = TestCommand::new(&dir.path, &["run", "-q", "-s", "bad.yaml", "w.jsonl", "-o", "x.jsonl"]).fails();
    assert!(err.contains("fp8_gemm_release") && err.contains("0.14"), "{err}");
    dir.create("roof.yaml", &format!("{}latency_model: roofline\n", scenario("H100", "0.14")));
    let err = TestCommand::new(&dir.path, &["run", "-q", "-s", "roof.yaml", "w.jsonl", "-o", "x.jsonl"]).fails();
    assert!(err.contains("fp8_gemm_release") && err.contains("kernels"), "{err}");
    assert!(!dir.join("x.jsonl").exists());
}

#[test]
fn convert_says_how_a_row_was_measured() {
    let dir = Dir::new("silicon-convert");
    std::fs::create_dir_all(dir.join("data")).unwrap();
    dir.create("data/silicon_sample.csv", &format!("{HEADER}{BEFORE_AND_AFTER}"));
    let row = "H200-Llama-3.1-70B-tp2-fp8-1024x1024-c4-line3";
    let out =
        TestCommand::new(&dir.path, &["convert", "silicon", "--data", "data", "--row", row, "--out", "conv"]).output();
    assert!(out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("protocol A") && err.contains("8 warm-ups"), "{err}");
    // The workload is the 40 measured requests.
    assert_eq!(dir.read(&format!("conv/{row}.workload.jsonl")).lines().count(), 40);
    let scenario = dir.read(&format!("conv/{row}.scenario.yaml"));
    assert!(scenario.contains("enable_prefix_caching: false") && scenario.contains("max_num_seqs: 4"), "{scenario}");
}
