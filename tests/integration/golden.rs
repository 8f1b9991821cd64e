//! Today's numbers, pinned: every example workload on every example
//! scenario, and the converted real-run fixture, with the client options
//! that shape a run, hash to the values in `tests/data/golden-results.txt`
//! (results, step trace and metrics, byte for byte). A change that moves any
//! simulated number shows here, and must say why in its commit; a cluster of
//! one replica must keep every line. `BLIS_GOLDEN_UPDATE=1 cargo test golden`
//! rewrites the file. (The latency models call `ln`/`exp`: a platform whose
//! libm rounds those differently in the last bit would move these hashes
//! without any change here; CI runs on the machine kind they were made on.)

use std::fmt::Write as _;
use std::path::Path;

use crate::util::{Dir, TestCommand};

/// A copy of `scenario` with `replicas: 1` and a weighted router, in `dir`
/// (beside the scenario when it names files relative to itself).
fn one_replica_cluster(scenario: &Path, dir: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(scenario).unwrap();
    let mut spec: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    spec["replicas"] = 1.into();
    spec["router"] = serde_json::json!({
        "policy": "weighted",
        "refresh_interval_ms": 50,
        "scorers": [{"name": "prefix-cache", "weight": 2}, {"name": "queue", "weight": 1}]
    });
    let dir = if spec.get("model_config").is_some() { scenario.parent().unwrap() } else { dir };
    let out = dir.join("one-replica.json");
    std::fs::write(&out, serde_json::to_string(&spec).unwrap()).unwrap();
    out
}

/// FNV-1a, 64 bits.
fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

#[test]
fn every_example_keeps_its_results() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Dir::new("golden");
    let mut cases: Vec<(String, String, String, Vec<&str>)> = Vec::new();
    for scenario in [
        "llama-3.1-8b-h100-tp1.yaml",
        "llama-2-7b-h100-tp1.yaml",
        "codellama-34b-h100-tp2.yaml",
        "llama-3.1-70b-h200-tp4-fp8.yaml",
        "qwen3-30b-a3b-h100.json",
    ] {
        for workload in ["chat-200.jsonl", "agentic-40.jsonl"] {
            let s = root.join("sweeps/scenarios").join(scenario).display().to_string();
            let w = root.join("sweeps/workloads").join(workload).display().to_string();
            cases.push((format!("{scenario} {workload}"), s.clone(), w.clone(), vec![]));
            cases.push((
                format!("{scenario} {workload} capped"),
                s.clone(),
                w.clone(),
                vec!["--concurrency", "8", "--timeout", "20"],
            ));
        }
    }
    let data = root.join("tests/data/blis-mini").display().to_string();
    TestCommand::new(&dir.path, &["convert", "blis-vllm-h100", "--data", &data, "--out", "mini"]).stdout();
    let (s, w) = (dir.join("mini/mini.scenario.yaml"), dir.join("mini/mini.workload.jsonl"));
    cases.push((
        "blis-mini converted".into(),
        s.display().to_string(),
        w.display().to_string(),
        vec!["--timeout", "300"],
    ));
    let mut text = String::new();
    for (name, scenario, workload, extra) in &cases {
        let mut args = vec![
            "run",
            "-q",
            "-s",
            scenario,
            workload,
            "-o",
            "r.jsonl",
            "--metrics",
            "m.json",
            "--step-trace",
            "s.jsonl",
        ];
        args.extend_from_slice(extra);
        TestCommand::new(&dir.path, &args).stdout();
        let h = [dir.read("r.jsonl"), dir.read("s.jsonl"), dir.read("m.json")].map(|t| hash(t.as_bytes()));
        writeln!(text, "{:016x} {:016x} {:016x}  {name}", h[0], h[1], h[2]).unwrap();
        // The same deployment as a cluster of one replica behind a router
        // that reads the prefix index and a stale view: not a byte moves.
        let one = one_replica_cluster(Path::new(scenario), &dir.path);
        args[3] = one.to_str().unwrap();
        TestCommand::new(&dir.path, &args).stdout();
        let c = [dir.read("r.jsonl"), dir.read("s.jsonl"), dir.read("m.json")].map(|t| hash(t.as_bytes()));
        assert_eq!(c, h, "{name}: a cluster of one replica differs from the single engine");
        std::fs::remove_file(one).unwrap();
    }
    let file = root.join("tests/data/golden-results.txt");
    if std::env::var_os("BLIS_GOLDEN_UPDATE").is_some() {
        std::fs::write(&file, &text).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&file).unwrap_or_default();
    if expected != text {
        let differ: Vec<&str> = text
            .lines()
            .zip(expected.lines().chain(std::iter::repeat("")))
            .filter(|(a, b)| a != b)
            .map(|(a, _)| a)
            .collect();
        panic!("simulated results moved (results, steps, metrics hashes):\n{}", differ.join("\n"));
    }
}
