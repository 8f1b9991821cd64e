//! Test helpers: a temporary directory with files, and `TestCommand`, which
//! runs the real `blis-sweep` binary and captures what it printed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh directory under the target dir, removed on drop.
pub struct Dir {
    pub path: PathBuf,
}

impl Dir {
    pub fn new(name: &str) -> Dir {
        static N: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "blis-sweep-test-{}-{}-{}",
            name,
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Dir { path }
    }

    pub fn create(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.path.join(name);
        std::fs::write(&p, contents).unwrap();
        p
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path.join(name)).unwrap()
    }

    /// Names of the files in the directory, sorted.
    pub fn files(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.path)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The real binary, run in `dir`.
pub struct TestCommand {
    cmd: Command,
}

impl TestCommand {
    pub fn new(dir: &Path, args: &[&str]) -> TestCommand {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_blis-sweep"));
        cmd.current_dir(dir).args(args);
        TestCommand { cmd }
    }

    /// Sets an environment variable for the run.
    pub fn env(&mut self, key: &str, value: &str) -> &mut TestCommand {
        self.cmd.env(key, value);
        self
    }

    pub fn output(&mut self) -> Output {
        self.cmd.output().unwrap()
    }

    /// Runs, asserts success, returns stdout.
    pub fn stdout(&mut self) -> String {
        let out = self.output();
        assert!(
            out.status.success(),
            "command failed ({:?})\n--- stderr ---\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs, asserts exit code 2, returns stderr.
    pub fn fails(&mut self) -> String {
        let out = self.output();
        assert_eq!(
            out.status.code(),
            Some(2),
            "expected exit 2\n--- stdout ---\n{}\n--- stderr ---\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stderr).unwrap()
    }
}

/// A scenario with a linear latency model, so every step time is hand-computable:
/// `step = 1000 + 2·prefill + 10·decode` µs.
/// One request at a time (max_num_seqs 1), every step 1 ms, each request a
/// prefill step and one decode step: 2 ms of service, 500 req/s.
pub const TWO_MS_SCENARIO: &str = "\
name: two-ms
model: Llama-3.1-8B
hardware: H100
engine: {max_num_seqs: 1, max_num_batched_tokens: 64, num_gpu_blocks: 1000, enable_prefix_caching: false, async_scheduling: false}
latency_model: {kind: linear, beta: [1000, 0, 0]}
";

pub const LINEAR_SCENARIO: &str = "\
name: linear-test
model: Llama-3.1-8B
hardware: H100
engine:
  max_num_seqs: 16
  max_num_batched_tokens: 4096
  block_size: 16
  num_gpu_blocks: 1000
latency_model: {kind: linear, beta: [1000, 2, 10]}
";

/// Parses a result JSONL into JSON values.
pub fn rows(text: &str) -> Vec<serde_json::Value> {
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// token_latency of node `node` of `row`, in integer µs.
pub fn latencies_us(row: &serde_json::Value, node: usize) -> Vec<u64> {
    row["sub_requests"][node]["token_latency"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v.as_f64().unwrap() * 1e6).round() as u64)
        .collect()
}

/// Runs a shell line in `dir` (`$BIN` is the binary); returns (exit code,
/// stderr).
pub fn sh(dir: &Path, line: &str) -> (Option<i32>, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(line)
        .env("BIN", env!("CARGO_BIN_EXE_blis-sweep"))
        .current_dir(dir)
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A sink that keeps every finished request and every engine step, for
/// tests that check a run step by step.
#[derive(Default)]
pub struct Steps {
    pub done: Vec<blis_sweep::sim::FinishedRequest>,
    pub steps: Vec<blis_sweep::sim::EngineStep>,
}

impl blis_sweep::sim::ResultSink for Steps {
    fn request_done(&mut self, request: blis_sweep::sim::FinishedRequest) {
        self.done.push(request);
    }

    fn engine_step(&mut self, step: &blis_sweep::sim::EngineStep) {
        self.steps.push(step.clone());
    }
}

/// The Vega-Lite spec of chart `id` in a report's HTML (its
/// `<script type="application/json" class="spec">`).
pub fn chart_spec(html: &str, id: &str) -> serde_json::Value {
    let start = html.find(&format!("<figure class=\"chart\" id=\"{id}\">")).unwrap_or_else(|| panic!("no chart {id}"));
    let figure = &html[start..start + html[start..].find("</figure>").unwrap()];
    let open = "<script type=\"application/json\" class=\"spec\">";
    let at = figure.find(open).unwrap() + open.len();
    serde_json::from_str(&figure[at..at + figure[at..].find("</script>").unwrap()]).unwrap()
}
