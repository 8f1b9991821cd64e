//! Calibration: the report's statistics on hand-computed inputs, warm-up,
//! RTT shift, unmatched requests, TraceV2 input, and the converters.

use crate::parquet_util::read_columns;
use crate::util::{Dir, TestCommand, rows};

/// A one-node result row: `tokens` latencies in seconds.
fn row(id: u64, arrival: f64, input: u32, tokens: &[f64]) -> String {
    let latency: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
    format!(
        r#"{{"request_id": {id}, "arrival_time": {arrival}, "initial": [0], "sub_requests": [{{"kind": "llm", "input_tokens": {input}, "output_tokens": {}, "next": [], "token_latency": [{}]}}]}}"#,
        tokens.len(),
        latency.join(", ")
    ) + "\n"
}

fn report(dir: &Dir, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["calibrate", "--sim", "sim.jsonl", "--report", "report.json"];
    all.extend_from_slice(args);
    TestCommand::new(&dir.path, &all).stdout();
    serde_json::from_str(&dir.read("report.json")).unwrap()
}

#[test]
fn statistics_on_hand_computed_pairs() {
    let dir = Dir::new("calibrate");
    // Real TTFT 100, 200, 300, 400 ms; simulated 110, 180, 330, 400 ms.
    // Two tokens each, second gap 0.1 s real and 0.2 s simulated.
    let real: String =
        [(0, 0.1), (1, 0.2), (2, 0.3), (3, 0.4)].iter().map(|&(i, t)| row(i, i as f64, 10, &[t, 0.1])).collect();
    let sim: String =
        [(0, 0.11), (1, 0.18), (2, 0.33), (3, 0.4)].iter().map(|&(i, t)| row(i, i as f64, 10, &[t, 0.2])).collect();
    dir.create("real.jsonl", &real);
    dir.create("sim.jsonl", &sim);
    let r = report(&dir, &["--real", "real.jsonl", "--throughput-tolerance-pct", "10", "--num-gpus", "2"]);
    assert_eq!(r["trace_info"]["matched_pairs"], 4);
    let ttft = &r["metrics"]["ttft"];
    assert_eq!(ttft["count"], 4);
    assert_eq!(ttft["workload_level"]["real_mean"], 250000.0);
    assert_eq!(ttft["workload_level"]["sim_mean"], 255000.0);
    assert!((ttft["request_level"]["mape"].as_f64().unwrap() - 0.075).abs() < 1e-9);
    assert!((ttft["request_level"]["pearson_r"].as_f64().unwrap() - 0.987_919_5).abs() < 1e-6);
    assert_eq!(ttft["request_level"]["bias_direction"], "over-predict");
    assert_eq!(ttft["request_level"]["quality"], "excellent");
    // numpy.percentile([100, 200, 300, 400] ms, 90) = 370 ms
    assert!((ttft["workload_level"]["real_p90"].as_f64().unwrap() - 370_000.0).abs() < 1e-6);
    // E2E: real TTFT + 100 ms, sim TTFT + 200 ms: over by 5 ms (TTFT) + 100 ms.
    let e2e = &r["metrics"]["e2e"];
    assert!((e2e["workload_level"]["mean_error"].as_f64().unwrap() - 105_000.0).abs() < 1e-6);
    assert_eq!(e2e["request_level"]["bias_direction"], "over-predict");
    // ITL: one gap each, 100 vs 200 ms.
    assert!((r["metrics"]["itl"]["request_level"]["mape"].as_f64().unwrap() - 1.0).abs() < 1e-9);
    // Throughput: real runs 0 → 3.5 s, sim 0 → 3.6 s (last request: sent at 3 s).
    let tp = &r["throughput"];
    assert!((tp["real_runtime_sec"].as_f64().unwrap() - 3.5).abs() < 1e-9);
    assert!((tp["sim_runtime_sec"].as_f64().unwrap() - 3.6).abs() < 1e-9);
    assert_eq!(tp["num_gpus"], 2);
    assert_eq!(tp["within"], true);
    assert_eq!(r["known_limitations"].as_array().unwrap().len(), 4);
    assert!(r["config_match"]["matched"].as_array().unwrap().is_empty());

    // Warm-up drops the first real request; RTT shifts the simulated side.
    let r = report(&dir, &["--real", "real.jsonl", "--warmup-requests", "1", "--network-rtt-us", "1000"]);
    assert_eq!(r["trace_info"]["warm_up_excluded"], 1);
    assert_eq!(r["trace_info"]["matched_pairs"], 3);
    let m = &r["metrics"]["ttft"]["workload_level"];
    assert!((m["sim_mean"].as_f64().unwrap() - (180_000.0 + 330_000.0 + 400_000.0) / 3.0 - 1000.0).abs() < 1e-6);

    // Unmatched on both sides are counted, not compared.
    let sim: String = [(0, 0.11), (1, 0.18), (9, 0.5)].iter().map(|&(i, t)| row(i, i as f64, 10, &[t, 0.2])).collect();
    dir.create("sim.jsonl", &sim);
    let r = report(&dir, &["--real", "real.jsonl"]);
    assert_eq!(r["trace_info"]["matched_pairs"], 2);
    assert_eq!(r["trace_info"]["unmatched_real"], 2);
    assert_eq!(r["trace_info"]["unmatched_sim"], 1);
    assert_eq!(r["trace_info"]["num_requests"], 4);
    // A different prompt length is a token mismatch.
    dir.create("sim.jsonl", &row(0, 0.0, 11, &[0.1, 0.1]));
    assert_eq!(report(&dir, &["--real", "real.jsonl"])["trace_info"]["token_mismatches"], 1);
}

#[test]
fn tracev2_is_read_with_its_header_defaults() {
    let dir = Dir::new("calibrate-trace");
    dir.create(
        "t.yaml",
        "trace_version: 3\ntime_unit: microseconds\nmode: real\nwarm_up_requests: 1\nnetwork: {measured_rtt_ms: 2}\n",
    );
    dir.create(
        "t.csv",
        "request_id,client_id,input_tokens,output_tokens,server_input_tokens,arrival_time_us,send_time_us,first_chunk_time_us,last_chunk_time_us,num_chunks,status\n\
         0,c,10,2,0,0,1000,101000,201000,2,ok\n\
         1,c,10,2,0,0,2000,202000,402000,2,ok\n\
         2,c,10,2,0,0,3000,3000,3000,0,error\n",
    );
    dir.create(
        "sim.jsonl",
        &(row(0, 0.0, 10, &[0.1, 0.1]) + &row(1, 0.0, 10, &[0.198, 0.2]) + &row(2, 0.0, 10, &[0.1, 0.1])),
    );
    let r = report(&dir, &["--trace-header", "t.yaml", "--trace-data", "t.csv"]);
    assert_eq!(r["trace_info"]["warm_up_excluded"], 1);
    // Request 1: real TTFT 200 ms; simulated 198 ms + the header's 2 ms RTT.
    assert_eq!(r["metrics"]["ttft"]["workload_level"]["real_mean"], 200_000.0);
    assert_eq!(r["metrics"]["ttft"]["workload_level"]["sim_mean"], 200_000.0);
    // The failed request has no latencies to compare.
    assert_eq!(r["metrics"]["e2e"]["count"], 1);
    assert!(r["metrics"].get("itl").is_none());
}

#[test]
fn blis_runs_convert_into_workload_baseline_and_scenario() {
    let dir = Dir::new("convert");
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/blis-mini");
    TestCommand::new(&dir.path, &["convert", "blis-vllm-h100", "--data", data, "--out", "out"]).stdout();
    assert_eq!(dir.files(), ["out"]);
    let workload = rows(&dir.read("out/mini.workload.jsonl"));
    let baseline = rows(&dir.read("out/mini.baseline.jsonl"));
    // The has_error row (the client's 300 s timeout) is replayed with its
    // pooled prompt's length (request 2 sends prompt 0, as request 0 did) but
    // has no measurements to compare.
    assert_eq!((workload.len(), baseline.len()), (4, 3));
    assert_eq!(workload[2]["sub_requests"][0]["input_token_ids"], workload[0]["sub_requests"][0]["input_token_ids"]);
    let workload: Vec<_> = workload.into_iter().filter(|w| w["request_id"] != 2).collect();
    for (w, b) in workload.iter().zip(&baseline) {
        let node = &b["sub_requests"][0];
        assert_eq!(node["output_tokens"], 247, "the profile's output_len");
        let lat: Vec<f64> = node["token_latency"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        assert_eq!(lat.len(), 247);
        assert_eq!(w["sub_requests"][0]["input_token_ids"], node["input_token_ids"]);
    }
    // E2E survives the spreading (to the µs the result format keeps).
    let lat0: f64 =
        baseline[0]["sub_requests"][0]["token_latency"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).sum();
    assert!((lat0 - 1.942).abs() < 1e-5, "{lat0}");
    // inference-perf's pool holds 2 prompts (results_config.yaml): request i
    // sends prompt i mod 2, so requests 1 and 3 repeat one prompt (as far as
    // the shorter goes) and request 0 has the other group's system prompt.
    let ids = |i: usize| workload[i]["sub_requests"][0]["input_token_ids"].as_array().unwrap().clone();
    assert_ne!(ids(0)[..100], ids(1)[..100]);
    assert_eq!(ids(1)[..589], ids(2)[..589]);
    assert_ne!(ids(0)[100..589], ids(1)[100..589]);
    // The scenario runs, and the report compares the baseline with it.
    TestCommand::new(
        &dir.path,
        &["run", "-q", "-s", "out/mini.scenario.yaml", "out/mini.workload.jsonl", "-o", "sim.jsonl"],
    )
    .stdout();
    TestCommand::new(
        &dir.path,
        &["calibrate", "--real", "out/mini.baseline.jsonl", "--sim", "sim.jsonl", "--report", "r.json"],
    )
    .stdout();
    let r: serde_json::Value = serde_json::from_str(&dir.read("r.json")).unwrap();
    assert_eq!(r["trace_info"]["matched_pairs"], 3);
    assert_eq!(r["trace_info"]["token_mismatches"], 0);
}

#[test]
fn fit_recovers_a_known_constant_from_synthetic_runs() {
    let dir = Dir::new("fit");
    // The "real" run: the measured-kernel model with a 1500 µs per-step overhead.
    let scenario = "model: Llama-3.1-8B\nhardware: H100\nengine: {max_num_seqs: 64, max_num_batched_tokens: 2048}\n";
    dir.create(
        "truth.yaml",
        &format!("{scenario}latency_model: {{kind: kernels, constants: {{step_overhead_us: 1500}}}}\n"),
    );
    let workload: String =
        include_str!("../../sweeps/workloads/chat-200.jsonl").lines().take(60).map(|l| format!("{l}\n")).collect();
    dir.create("s.workload.jsonl", &workload);
    TestCommand::new(&dir.path, &["run", "-q", "-s", "truth.yaml", "s.workload.jsonl", "-o", "s.baseline.jsonl"])
        .stdout();
    // Fit the overhead of the default scenario back.
    dir.create("s.scenario.yaml", scenario);
    TestCommand::new(
        &dir.path,
        &["fit", "--runs", ".", "--experiment", "s", "--params", "step_overhead_us", "--out", "fitted.yaml"],
    )
    .stdout();
    let fitted: serde_json::Value = blis_sweep::yaml::parse(&dir.read("fitted.yaml")).unwrap();
    let got = fitted["step_overhead_us"].as_f64().unwrap();
    assert!((got / 1500.0 - 1.0).abs() < 0.02, "fitted {got} µs");
    // The fitted file is a constants file a scenario can name.
    dir.create(
        "fitted-scenario.yaml",
        &format!("{scenario}latency_model: {{kind: kernels, constants_file: fitted.yaml}}\n"),
    );
    TestCommand::new(&dir.path, &["run", "-q", "-s", "fitted-scenario.yaml", "s.workload.jsonl", "-o", "refit.jsonl"])
        .stdout();
    TestCommand::new(
        &dir.path,
        &["calibrate", "--real", "s.baseline.jsonl", "--sim", "refit.jsonl", "--report", "r.json"],
    )
    .stdout();
    let r: serde_json::Value = serde_json::from_str(&dir.read("r.json")).unwrap();
    assert!(r["metrics"]["itl"]["workload_level"]["mean_percent_error"].as_f64().unwrap() < 0.01);
}

/// A server no datasheet describes (`hardware: custom`, as vLLM on a CPU):
/// its linear model's named constants are fitted back from synthetic runs
/// at two loads, starting a factor of two off, and the fitted file predicts
/// a third load.
#[test]
fn fit_recovers_a_custom_servers_linear_constants_and_predicts_another_load() {
    let dir = Dir::new("fit-custom");
    let scenario = "model: Llama-3.1-8B\nhardware: custom\n\
                    engine: {num_gpu_blocks: 4000, block_size: 32, max_num_seqs: 64, max_num_batched_tokens: 2048}\n";
    let truth = "{step_us: 4000, prefill_token_us: 20, decode_token_us: 300, request_overhead_us: 10000}";
    dir.create("truth.yaml", &format!("{scenario}latency_model: {{kind: linear, constants: {truth}}}\n"));
    dir.create(
        "start.yaml",
        "{step_us: 2000, prefill_token_us: 40, decode_token_us: 150, request_overhead_us: 20000}\n",
    );
    let chat: Vec<&str> = include_str!("../../sweeps/workloads/chat-200.jsonl").lines().collect();
    // Three loads: the same requests' arrivals stretched or squeezed.
    for (name, scale) in [("slow", 4.0), ("fast", 1.0), ("mid", 2.0)] {
        let rows: String = chat[..50]
            .iter()
            .map(|l| {
                let mut r: serde_json::Value = serde_json::from_str(l).unwrap();
                r["arrival_time"] = serde_json::json!(r["arrival_time"].as_f64().unwrap() * scale);
                format!("{r}\n")
            })
            .collect();
        dir.create(&format!("{name}.workload.jsonl"), &rows);
        dir.create(
            &format!("{name}.scenario.yaml"),
            &format!("{scenario}latency_model: {{kind: linear, constants_file: start.yaml}}\n"),
        );
        let (w, b) = (format!("{name}.workload.jsonl"), format!("{name}.baseline.jsonl"));
        TestCommand::new(&dir.path, &["run", "-q", "-s", "truth.yaml", &w, "-o", &b]).stdout();
    }
    let params = "step_us,prefill_token_us,decode_token_us,request_overhead_us";
    let args = ["fit", "--runs", ".", "--experiment", "slow", "--experiment", "fast", "--params", params];
    let err =
        TestCommand::new(&dir.path, &[&args[..], &["--score", "e2e_mean,p99", "--out", "f.yaml"]].concat()).fails();
    assert!(
        err.contains("--score: unknown measurement `p99`; one of e2e_mean, itl_mean, ttft_mean, ttft_p99"),
        "{err}"
    );
    TestCommand::new(&dir.path, &[&args[..], &["--max-evaluations", "200", "--out", "fitted.yaml"]].concat()).stdout();
    let fitted: serde_json::Value = blis_sweep::yaml::parse(&dir.read("fitted.yaml")).unwrap();
    let decode = fitted["decode_token_us"].as_f64().unwrap();
    assert!((decode / 300.0 - 1.0).abs() < 0.1, "decode_token_us fitted {decode}");
    dir.create("predict.yaml", &format!("{scenario}latency_model: {{kind: linear, constants_file: fitted.yaml}}\n"));
    TestCommand::new(&dir.path, &["run", "-q", "-s", "predict.yaml", "mid.workload.jsonl", "-o", "p.jsonl"]).stdout();
    TestCommand::new(
        &dir.path,
        &["calibrate", "--real", "mid.baseline.jsonl", "--sim", "p.jsonl", "--report", "r.json"],
    )
    .stdout();
    let r: serde_json::Value = serde_json::from_str(&dir.read("r.json")).unwrap();
    for metric in ["e2e", "itl"] {
        let err = r["metrics"][metric]["workload_level"]["mean_percent_error"].as_f64().unwrap();
        assert!(err < 0.02, "{metric}: {err}");
    }
}

#[test]
fn request_overhead_delays_the_engine_and_counts_in_ttft() {
    let dir = Dir::new("overhead");
    let one = r#"{"request_id": 0, "arrival_time": 0.0, "initial": [0], "sub_requests": [{"kind": "llm", "input_tokens": 100, "output_tokens": 3, "next": []}]}"#;
    dir.create("w.jsonl", &format!("{one}\n"));
    let mut ttft = Vec::new();
    for extra in
        ["latency_model: roofline\n", "latency_model: {kind: roofline, constants: {request_overhead_us: 5000}}\n"]
    {
        dir.create("s.yaml", &format!("model: Llama-3.1-8B\nhardware: H100\n{extra}"));
        let out = TestCommand::new(&dir.path, &["run", "-q", "-s", "s.yaml", "w.jsonl"]).stdout();
        ttft.push(crate::util::latencies_us(&rows(&out)[0], 0));
    }
    assert_eq!(ttft[1][0], ttft[0][0] + 5000);
    assert_eq!(ttft[1][1..], ttft[0][1..]);
    // Unknown or out-of-range constants are refused with their key.
    dir.create(
        "s.yaml",
        "model: Llama-3.1-8B\nhardware: H100\nlatency_model: {kind: roofline, constants: {gemm_eff: 0.5}}\n",
    );
    let err = TestCommand::new(&dir.path, &["run", "-q", "-s", "s.yaml", "w.jsonl"]).fails();
    assert!(err.contains("latency_model.constants") && err.contains("gemm_eff"), "{err}");
    dir.create(
        "s.yaml",
        "model: Llama-3.1-8B\nhardware: H100\nlatency_model: {kind: roofline, constants: {gemm_efficiency: 2}}\n",
    );
    let err = TestCommand::new(&dir.path, &["run", "-q", "-s", "s.yaml", "w.jsonl"]).fails();
    assert!(err.contains("gemm_efficiency: 2 must be in (0, 1]"), "{err}");
}

#[test]
fn a_calibration_plan_replays_each_run_and_writes_the_matrix() {
    let dir = Dir::new("matrix");
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/blis-mini");
    dir.create(
        "plan.yaml",
        &format!("name: m\ncalibration:\n  - {{source: blis-vllm-h100, data: {data}}}\noutput: out\n"),
    );
    TestCommand::new(&dir.path, &["plan.yaml", "-q"]).stdout();
    let rows = read_columns(
        &dir.join("out/calibration.parquet"),
        &["experiment", "latency_model", "metric", "real_ms", "error", "blis_error", "pairs"],
    );
    let metrics: Vec<&str> = rows.iter().map(|r| r[2].as_str()).collect();
    assert_eq!(
        metrics,
        [
            "ttft_mean",
            "ttft_p90",
            "ttft_p99",
            "ttft_mape",
            "itl_mean",
            "itl_mape",
            "e2e_mean",
            "e2e_p90",
            "e2e_p99",
            "e2e_mape"
        ]
    );
    for r in &rows {
        assert_eq!((r[0].as_str(), r[1].as_str(), r[6].as_str()), ("mini", "kernels", "3"), "{r:?}");
    }
    // The whole-run row of aggregates_eval38.csv: BLIS predicted 2200 ms for 2000.
    let e2e = rows.iter().find(|r| r[2] == "e2e_mean").unwrap();
    assert!((e2e[5].parse::<f64>().unwrap() - 0.1).abs() < 1e-9, "{e2e:?}");
    // Mean real E2E: (1942 + 1898 + 2010) / 3 ms, and the error is sim / real − 1.
    assert!((e2e[3].parse::<f64>().unwrap() - 1950.0).abs() < 1e-6, "{e2e:?}");
    let md = dir.read("out/calibration.md");
    assert!(md.contains("| mini | Llama-2-7b / H100 / TP1 / kernels |") && md.contains("(+10.0 %)"), "{md}");
    let report: serde_json::Value = serde_json::from_str(&dir.read("out/reports/mini.json")).unwrap();
    assert_eq!(report["trace_info"]["matched_pairs"], 3);
    // A run the source does not have stops the plan before anything runs.
    dir.create(
        "bad.yaml",
        &format!(
            "name: m\ncalibration:\n  - {{source: blis-vllm-h100, data: {data}, experiments: [nope]}}\noutput: out2\n"
        ),
    );
    let err = TestCommand::new(&dir.path, &["bad.yaml"]).fails();
    assert!(err.contains("calibration[0].experiments") && err.contains("nope"), "{err}");
    assert!(!dir.join("out2").exists());
}

#[test]
fn training_runs_known_by_their_aggregates_are_compared_on_them() {
    let dir = Dir::new("trainval");
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/trainval-mini");
    dir.create(
        "plan.yaml",
        &format!("name: t\ncalibration:\n  - {{source: blis-trainval, data: {data}}}\noutput: out\n"),
    );
    // The Kimi-K2 run's model is not in the catalog: the plan finishes, naming why.
    let out = TestCommand::new(&dir.path, &["plan.yaml"]).output();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("8-kimi-k2-tp2-mini: failed: ")
            && err.contains("moonshotai/Kimi-K2-Instruct is not in the catalog"),
        "{err}"
    );
    // The run with per-request data is not listed here (blis-vllm-h100 replays it).
    assert!(!err.contains("per-request-run"), "{err}");
    let rows = read_columns(
        &dir.join("out/calibration.parquet"),
        &["experiment", "source", "metric", "real_ms", "simulated_ms", "error", "blis_error", "pairs"],
    );
    let metrics: Vec<&str> = rows.iter().map(|r| r[2].as_str()).collect();
    assert_eq!(metrics, ["e2e_mean", "ttft_mean", "ttft_p99", "itl_mean"]);
    for r in &rows {
        // 2 req/s × 10 s then 4 req/s × 10 s: 60 requests, all whole-run.
        assert_eq!((r[0].as_str(), r[1].as_str(), r[7].as_str()), ("7-llama-2-7b-tp1-mini", "blis-trainval", "60"));
        let (real, sim, error): (f64, f64, f64) = (r[3].parse().unwrap(), r[4].parse().unwrap(), r[5].parse().unwrap());
        assert!((error - (sim / real - 1.0)).abs() < 1e-12, "{r:?}");
    }
    // BLIS predicted 220 ms for 200.
    assert!((rows[0][6].parse::<f64>().unwrap() - 0.1).abs() < 1e-9);
    // ITL as the real client derived it: (E2E − TTFT) / (200 − 20) × 10 + 1 = 19 tokens.
    let sim = |m: &str| rows.iter().find(|r| r[2] == m).unwrap()[4].parse::<f64>().unwrap();
    assert!((sim("itl_mean") - (sim("e2e_mean") - sim("ttft_mean")) / 18.0).abs() < 1e-9);
    // Per stage in the report: stage 0's requests sent in [0, 10) s.
    let report: serde_json::Value = serde_json::from_str(&dir.read("out/reports/7-llama-2-7b-tp1-mini.json")).unwrap();
    let stages: Vec<(i64, u64)> = report
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["metric"] == "e2e_mean")
        .map(|a| (a["stage"].as_i64().unwrap(), a["requests"].as_u64().unwrap()))
        .collect();
    assert_eq!(stages, [(-1, 60), (0, 20), (1, 40)]);
}

#[test]
fn fit_recovers_a_known_constant_from_aggregates_alone() {
    let dir = Dir::new("fit-trainval");
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/trainval-mini");
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::copy(
        format!("{fixture}/trainval15_experiment_configs.json"),
        dir.join("data/trainval15_experiment_configs.json"),
    )
    .unwrap();
    let header = "experiment,same_run_as_requests_file,exp_id,model,hardware,precision,tp,dp,cpu_offload,gpu_mem_util,\
                  max_num_batched_tokens,workload,stage_index,metric,actual_ms,pred_ms_blis-evolved\n";
    let csv = |values: [f64; 3]| {
        let mut text = header.to_owned();
        for (metric, v) in ["e2e_mean", "ttft_mean", "ttft_p99"].iter().zip(values) {
            text.push_str(&format!("7-llama-2-7b-tp1-mini,,7,m,H100,,1,,,,2048,g,-1,{metric},{v},\n"));
        }
        text
    };
    // The "real" aggregates: the kernels model with a 1500 µs step overhead.
    dir.create("data/aggregates_trainval.csv", &csv([1.0, 1.0, 1.0]));
    let data = dir.join("data").display().to_string();
    dir.create(
        "truth.yaml",
        &format!(
            "name: t\ncalibration:\n  - {{source: blis-trainval, data: {data}}}\n\
             overrides: {{latency_model: {{kind: kernels, constants: {{step_overhead_us: 1500}}}}}}\noutput: truth\n"
        ),
    );
    TestCommand::new(&dir.path, &["-q", "--no-report", "truth.yaml"]).stdout();
    let rows = read_columns(&dir.join("truth/calibration.parquet"), &["metric", "simulated_ms"]);
    let sim = |m: &str| rows.iter().find(|r| r[0] == m).unwrap()[1].parse::<f64>().unwrap();
    dir.create("data/aggregates_trainval.csv", &csv([sim("e2e_mean"), sim("ttft_mean"), sim("ttft_p99")]));
    // Fitted back from the default constants, on the aggregates alone.
    TestCommand::new(
        &dir.path,
        &[
            "fit",
            "--trainval",
            "data",
            "--trainval-experiment",
            "7-llama-2-7b-tp1-mini",
            "--params",
            "step_overhead_us",
            "--out",
            "fitted.yaml",
        ],
    )
    .stdout();
    let fitted: serde_json::Value = blis_sweep::yaml::parse(&dir.read("fitted.yaml")).unwrap();
    let got = fitted["step_overhead_us"].as_f64().unwrap();
    assert!((got / 1500.0 - 1.0).abs() < 0.02, "fitted {got} µs");
    assert!(dir.read("fitted.yaml").contains("#   7-llama-2-7b-tp1-mini: E2E"));
    // Runs to fit on are required.
    let err = TestCommand::new(&dir.path, &["fit", "--out", "x.yaml"]).fails();
    assert!(err.contains("give runs to fit on"), "{err}");
}

#[test]
fn measured_deployments_are_replayed_as_closed_loop_benchmarks() {
    let dir = Dir::new("silicon");
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/silicon-mini");
    dir.create("plan.yaml", &format!("name: s\ncalibration:\n  - {{source: silicon, data: {data}}}\noutput: out\n"));
    TestCommand::new(&dir.path, &["-q", "--no-report", "plan.yaml"]).stdout();
    let rows = read_columns(&dir.join("out/calibration.parquet"), &["experiment", "tp", "metric", "real_ms", "pairs"]);
    // vLLM rows on H100, H200 and B200 for catalog models only (not SGLang,
    // not GLM-4.6, which is not in the catalog), an MoE model only with its
    // experts sharded like its attention (not the expert-parallel row g);
    // concurrency from the source, else the batch size; ten prompts per
    // user; Qwen's -FP8 release with block-scaled weights.
    let got: Vec<[&str; 5]> = rows.iter().map(|r| [&*r[0], &*r[1], &*r[2], &*r[3], &*r[4]]).collect();
    assert_eq!(
        got,
        [
            ["H100-Qwen3-32B-tp2-bf16-64x8-c2-line2", "2", "ttft_mean", "40", "20"],
            ["H100-Qwen3-32B-tp2-bf16-64x8-c2-line2", "2", "tpot_mean", "12", "20"],
            ["H100-Qwen3-32B-tp4-fp8-32x4-c3-line3", "4", "ttft_mean", "30", "30"],
            ["H100-Qwen3-32B-tp4-fp8-32x4-c3-line3", "4", "tpot_mean", "9", "30"],
            ["B200-Qwen3-32B-tp2-bf16-64x8-c2-line6", "2", "ttft_mean", "1", "20"],
            ["B200-Qwen3-32B-tp2-bf16-64x8-c2-line6", "2", "tpot_mean", "1", "20"],
            ["H200-Qwen3-235B-A22B-tp2-fp8_block-64x8-c2-line7", "2", "ttft_mean", "50", "20"],
            ["H200-Qwen3-235B-A22B-tp2-fp8_block-64x8-c2-line7", "2", "tpot_mean", "30", "20"],
        ]
    );
}

/// A measured deployment on vLLM 0.12 ran without async scheduling: its
/// steps pay their CPU side on top of the GPU, so its TPOT tells the CPU
/// side, which `fit --silicon` recovers.
#[test]
fn fit_recovers_the_cpu_side_from_a_deployment_without_async_scheduling() {
    let dir = Dir::new("fit-silicon");
    let fixture =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/silicon-mini/silicon_sample.csv"))
            .unwrap();
    let row = "H100-Qwen3-32B-tp2-bf16-64x8-c2-line2";
    std::fs::create_dir_all(dir.join("data")).unwrap();
    dir.create("data/silicon_sample.csv", &fixture);
    dir.create(
        "truth.yaml",
        &format!(
            "name: t\ncalibration:\n  - {{source: silicon, data: data, experiments: [{row}]}}\n\
             overrides: {{latency_model: {{kind: kernels, constants: {{cpu_step_us: 3000}}}}}}\noutput: truth\n"
        ),
    );
    TestCommand::new(&dir.path, &["-q", "--no-report", "truth.yaml"]).stdout();
    let rows = read_columns(&dir.join("truth/calibration.parquet"), &["metric", "simulated_ms"]);
    let tpot = &rows.iter().find(|r| r[0] == "tpot_mean").unwrap()[1];
    // The row's measured TPOT (12.0 ms, the last column) becomes what the
    // 3000 µs CPU side gives.
    dir.create("data/silicon_sample.csv", &fixture.replacen(",40.0,12.0", &format!(",40.0,{tpot}"), 1));
    let args = ["fit", "--silicon", "data", "--silicon-row", row, "--params", "cpu_step_us", "--out", "fitted.yaml"];
    TestCommand::new(&dir.path, &args).stdout();
    let fitted: serde_json::Value = blis_sweep::yaml::parse(&dir.read("fitted.yaml")).unwrap();
    let got = fitted["cpu_step_us"].as_f64().unwrap();
    assert!((got / 3000.0 - 1.0).abs() < 0.02, "fitted {got} µs");
    // With async scheduling a CPU side shorter than the GPU's hides behind
    // it: the TPOT does not move (3000 µs as it stands, cpu_scale 1; the
    // embedded scale would make it longer than this step's GPU side).
    let tpot_with = |cpu: u32, extra: &str| {
        let out = format!("o{cpu}{}", extra.len());
        dir.create(
            "p.yaml",
            &format!(
                "name: p\ncalibration:\n  - {{source: silicon, data: data, experiments: [{row}]}}\n\
                 overrides:\n  latency_model: {{kind: kernels, constants: {{cpu_step_us: {cpu}, cpu_scale: 1}}}}\n{extra}output: {out}\n"
            ),
        );
        TestCommand::new(&dir.path, &["-q", "--no-report", "--force", "p.yaml"]).stdout();
        let rows = read_columns(&dir.join(&format!("{out}/calibration.parquet")), &["metric", "simulated_ms"]);
        rows.iter().find(|r| r[0] == "tpot_mean").unwrap()[1].parse::<f64>().unwrap()
    };
    let overlapped = "  engine.async_scheduling: true\n";
    assert_eq!(tpot_with(0, overlapped), tpot_with(3000, overlapped));
    assert!(tpot_with(3000, "") > tpot_with(0, "") + 2.5);
}

#[test]
fn measured_deployments_convert_to_a_workload_and_a_scenario() {
    let dir = Dir::new("convert-silicon");
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/silicon-mini");
    let row = "H100-Qwen3-32B-tp2-bf16-64x8-c2-line2";
    let args = ["convert", "silicon", "--data", data, "--row", row, "--out", "conv"];
    let out = TestCommand::new(&dir.path, &args).output();
    assert!(out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains(&format!("{row}: 20 requests")) && err.contains("--concurrency 2"), "{err}");
    let scenario = dir.read(&format!("conv/{row}.scenario.yaml"));
    // vLLM 0.12.0: no async scheduling.
    assert!(scenario.contains("tp: 2") && scenario.contains("async_scheduling: false"), "{scenario}");
    let (s, w) = (format!("conv/{row}.scenario.yaml"), format!("conv/{row}.workload.jsonl"));
    let results = TestCommand::new(&dir.path, &["run", "-q", "-s", &s, &w, "--concurrency", "2"]).stdout();
    assert_eq!(results.lines().count(), 20);
}

#[test]
fn training_runs_convert_to_a_workload_and_a_scenario() {
    let dir = Dir::new("convert-trainval");
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/trainval-mini");
    let out = TestCommand::new(&dir.path, &["convert", "blis-trainval", "--data", data, "--out", "conv"]).output();
    assert!(out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("7-llama-2-7b-tp1-mini: 60 requests"), "{err}");
    let scenario = dir.read("conv/7-llama-2-7b-tp1-mini.scenario.yaml");
    assert!(scenario.contains("model: Llama-2-7b") && scenario.contains("vllm_version: 0.15.1"), "{scenario}");
    let workload = dir.read("conv/7-llama-2-7b-tp1-mini.workload.jsonl");
    assert_eq!(workload.lines().count(), 60);
    // It runs as converted.
    let args =
        ["run", "-q", "-s", "conv/7-llama-2-7b-tp1-mini.scenario.yaml", "conv/7-llama-2-7b-tp1-mini.workload.jsonl"];
    assert_eq!(TestCommand::new(&dir.path, &args).stdout().lines().count(), 60);
    // An unknown run: one line, nothing written.
    let err = TestCommand::new(
        &dir.path,
        &["convert", "blis-trainval", "--data", data, "--experiment", "9-x", "--out", "c2"],
    )
    .fails();
    assert!(err.contains("no experiment with id 9"), "{err}");
    assert!(!dir.join("c2").exists() || std::fs::read_dir(dir.join("c2")).unwrap().next().is_none());
}

#[test]
fn bad_aggregate_sources_get_one_line_errors() {
    let dir = Dir::new("bad-aggregates");
    for sub in ["si", "tv"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    // A silicon file without the columns it needs stops the plan.
    dir.create("si/silicon_sample.csv", "id,backend\n1,vllm\n");
    dir.create("si.yaml", "name: b\ncalibration:\n  - {source: silicon, data: si}\noutput: o\n");
    let err = TestCommand::new(&dir.path, &["si.yaml"]).fails();
    assert!(err.contains("si/silicon_sample.csv:1: silicon_data_source: missing column"), "{err}");
    // A layout cell that is not a count names its line and column.
    let fixture =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/silicon-mini/silicon_sample.csv"))
            .unwrap();
    dir.create("si/silicon_sample.csv", &fixture.replace(",fp8,fp8,2,2,,,2,1,", ",fp8,fp8,2,2,,,two,1,"));
    let err = TestCommand::new(&dir.path, &["si.yaml"]).fails();
    assert!(err.contains("si/silicon_sample.csv:7: moe_tp_size: `two` is not a count"), "{err}");
    // A training run asking for 10^16 requests (its stages within the
    // clock) fails on its own, named.
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/trainval-mini");
    let configs = std::fs::read_to_string(format!("{fixture}/trainval15_experiment_configs.json")).unwrap();
    dir.create(
        "tv/trainval15_experiment_configs.json",
        &configs.replace(r#"{"duration": 10, "rate": 4.0}"#, r#"{"duration": 1e7, "rate": 1e9}"#),
    );
    dir.create(
        "tv/aggregates_trainval.csv",
        &std::fs::read_to_string(format!("{fixture}/aggregates_trainval.csv")).unwrap(),
    );
    dir.create(
        "tv.yaml",
        "name: b\ncalibration:\n  - {source: blis-trainval, data: tv, experiments: [7-llama-2-7b-tp1-mini]}\noutput: o2\n",
    );
    let out = TestCommand::new(&dir.path, &["tv.yaml"]).output();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("7-llama-2-7b-tp1-mini: failed: ") && err.contains("exceed what a replay holds"), "{err}");
}
