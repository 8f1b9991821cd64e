//! Sweep throughput: a 16-run sweep (BLIS's chatbot preset, 20,000 generated
//! requests a run; open loop and three concurrency caps × four seeds;
//! Llama-3.1-8B, H100, TP1) with `--jobs 1` and `--jobs 2`, each in its own
//! process. Prints wall time, the speed-up, the Parquet encoders' rows per
//! second of worker time (no `--tokens`), and peak RSS.
//!
//!     cargo bench --bench sweep
//!
//! Not a test: nothing is asserted; the figures go in the README.

#[path = "common/rss.rs"]
mod rss;

use std::path::Path;
use std::time::Instant;

use blis_sweep::sweep::executor::{self, SweepOptions};
use blis_sweep::sweep::grid;

const PLAN: &str = "\
name: bench
workload:
  generate: {preset: chatbot, num_requests: 20000, rate: 50}
scenarios: [SCENARIO]
grid:
  concurrency: [null, 16, 64, 256]
  seed: [1, 2, 3, 4]
output: OUTPUT
";

fn one(jobs: usize) {
    let dir = std::env::temp_dir().join(format!("blis-sweep-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("sweeps/scenarios/llama-3.1-8b-h100-tp1.yaml");
    let plan_text = PLAN
        .replace("SCENARIO", &scenario.display().to_string())
        .replace("OUTPUT", &dir.join("out").display().to_string());
    std::fs::write(dir.join("plan.yaml"), plan_text).unwrap();
    let plan = grid::load(&dir.join("plan.yaml")).unwrap();
    let wall = Instant::now();
    let report = executor::run(
        plan,
        &SweepOptions {
            jobs,
            force: true,
            tokens: false,
            results_jsonl: false,
            step_trace: false,
            shard: None,
            keep_other_runs: false,
            progress: None,
        },
        &mut |_| {},
    )
    .unwrap();
    let wall_s = wall.elapsed().as_secs_f64();
    assert_eq!(report.failed, 0);
    println!(
        "--jobs {jobs}: {} runs in {wall_s:.2} s, {} rows, Parquet encoding {:.2} M rows/s of worker time ({:.2} s in all), peak RSS {:.1} MiB",
        report.ran,
        report.rows_written,
        report.rows_written as f64 / report.encode_s / 1e6,
        report.encode_s,
        rss::peak_rss_mib()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().filter(|a| !a.starts_with("--")).collect();
    if let Some(i) = args.iter().position(|a| a == "one") {
        one(args[i + 1].parse().expect("a job count"));
        return;
    }
    let mut walls = Vec::new();
    for jobs in [1, 2] {
        let start = Instant::now();
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["one", &jobs.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        walls.push(start.elapsed().as_secs_f64());
    }
    println!(
        "speed-up --jobs 2 over --jobs 1: {:.2}x (process wall times {:.2} s and {:.2} s)",
        walls[0] / walls[1],
        walls[0],
        walls[1]
    );
}
