//! How much a sweep has to simulate, and how long and how much disk that
//! takes: the work of a run is its workload's tokens (every llm node's
//! output tokens plus its prompt tokens weighted by [`INPUT_WEIGHT`]), the
//! ETA is the elapsed time scaled by the work left over the work done (not
//! the runs: one 70B run at concurrency 1 is worth hundreds of small ones),
//! and the up-front estimate divides the work by a measured simulation speed.
//!
//! Pure: the caller passes the elapsed time and the workload's requests.

use crate::workload::{NodeKind, Request};

/// Weight of a prompt token against an output token. A decode token is one
/// engine step of per-request work; a prompt is scheduled in chunks and
/// costs the simulator per KV block more than per token. Measured with
/// `blis-sweep run -q --preset P --rate 1000 --num-requests 4000
/// --concurrency C` on Llama-3.1-8B/H100 (release build, this 2-core
/// machine): `summarization` (4096/512 tokens) took 0.70× `contentgen`'s
/// (1024/1024) time at C = 1 and 1.06× at C = 64; 1/16 fits the first, 1/6
/// the second, 1/8 is within 20 % of both.
pub const INPUT_WEIGHT: f64 = 1.0 / 8.0;

/// A step's fixed cost against one request's share of it, in work units: a
/// run whose client holds `c` requests at a time costs `1 + STEP_COST / c`
/// per unit ([`load_factor`]). Same measurements: a token simulated at C = 1
/// took 3–4× as long as at C = 64 (contentgen 0.67 s against 0.17 s; the
/// 70B at TP4 alike, 0.72 s against 0.16 s), which `1 + 3/c` gives (4 at
/// C = 1, 1.05 at 64).
pub const STEP_COST: f64 = 3.0;

/// Work units (see [`request_work`] × [`load_factor`]) simulated per second
/// by one core in a sweep, tables written: `sweeps/eta-mixed.yaml` (36 runs,
/// 792,000 requests, 1.38 × 10⁹ units) took 17.3–17.5 s on 2 cores of this
/// machine when quiet (`scripts/eta-accuracy.py`, README, Performance,
/// Progress), 4.0 × 10⁷ a core; 43.6 s while another build shared it.
pub const WORK_PER_CORE_S: f64 = 4.0e7;

/// Bytes the tables take per run (its Parquet parts' footers, its status,
/// metrics and timing files) and per request (a requests row and a nodes
/// row per llm call), solved from two sweeps' `du -sb`: `eta-mixed` (36
/// runs, 792,000 requests, 67.0 MB) and `quickstart` (12 runs, 2,400
/// requests, 675 kB).
pub const BYTES_PER_RUN: f64 = 40_000.0;

/// See [`BYTES_PER_RUN`].
pub const BYTES_PER_REQUEST: f64 = 83.0;

/// Bytes of `tokens/*.parquet` per output token (`--tokens`): quickstart's
/// 451 kB for 576,540 tokens.
pub const BYTES_PER_TOKEN: f64 = 0.8;

/// Bytes of a result JSONL row (`--results-jsonl`): README, Performance,
/// 100,000 requests of 256 ± 100 output tokens in 245 MB.
pub const BYTES_PER_JSONL_REQUEST: f64 = 2_450.0;

/// A warning is printed past this estimated time, s (an hour).
pub const WARN_SECONDS: f64 = 3600.0;

/// A warning is printed past this estimated disk use, bytes (10 GB).
pub const WARN_BYTES: f64 = 10e9;

/// What a workload holds: requests, their output tokens, and their work.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WorkloadSize {
    /// Requests.
    pub requests: u64,
    /// Output tokens, all llm nodes.
    pub output_tokens: u64,
    /// Work units ([`request_work`] summed).
    pub work: u64,
}

impl WorkloadSize {
    /// Adds one request.
    pub fn add(&mut self, r: &Request) {
        self.requests += 1;
        self.output_tokens += llm_nodes(r).map(|(_, out)| u64::from(out)).sum::<u64>();
        self.work += request_work(r);
    }
}

fn llm_nodes(r: &Request) -> impl Iterator<Item = (u32, u32)> + '_ {
    r.sub_requests.iter().filter_map(|s| match &s.kind {
        NodeKind::Llm(c) => Some((c.input_tokens, c.output_tokens)),
        NodeKind::ToolCall { .. } => None,
    })
}

/// A request's work units: its llm nodes' output tokens plus their prompt
/// tokens at [`INPUT_WEIGHT`], at least 1 (a request with only tool calls
/// still passes through the simulator).
pub fn request_work(r: &Request) -> u64 {
    let w: f64 = llm_nodes(r).map(|(i, o)| f64::from(o) + f64::from(i) * INPUT_WEIGHT).sum();
    (w.round() as u64).max(1)
}

/// What a run's client does to the cost of a unit of work: `1 + STEP_COST
/// / c` with `c` requests in flight at most (a concurrency cap or closed-loop
/// users); open loop, 1 (its batch is not known before the run; the ETA
/// corrects from the work done).
pub fn load_factor(concurrency: Option<u32>) -> f64 {
    concurrency.map_or(1.0, |c| 1.0 + STEP_COST / f64::from(c.max(1)))
}

/// Seconds left: `elapsed_s × (total − done) / done`; `None` while nothing
/// is done (no basis yet). Never 0 while work is left.
pub fn eta_s(elapsed_s: f64, done: u64, total: u64) -> Option<f64> {
    if done == 0 || elapsed_s <= 0.0 {
        return None;
    }
    let left = total.saturating_sub(done) as f64;
    Some(elapsed_s * left / done as f64)
}

/// An ETA as the progress line shows it: `—` without a basis, `<1 s` for
/// less than a second, else `1 h 02 m`, `3 m 05 s`, `12 s`.
pub fn format_eta(eta: Option<f64>) -> String {
    match eta {
        None => "—".to_owned(),
        Some(s) => format_duration(s),
    }
}

/// A duration, rounded to the second (`<1 s` below one second).
pub fn format_duration(s: f64) -> String {
    // (NaN too: no time known.)
    if s.is_nan() || s < 1.0 {
        return "<1 s".to_owned();
    }
    let s = s.round() as u64;
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, sec) => format!("{sec} s"),
        (0, m, sec) => format!("{m} m {sec:02} s"),
        (h, m, _) => format!("{h} h {m:02} m"),
    }
}

/// Bytes as `12 kB`, `3.4 MB`, `21 GB` (powers of 1000).
pub fn format_bytes(b: f64) -> String {
    let units = [("GB", 1e9), ("MB", 1e6), ("kB", 1e3)];
    for (name, size) in units {
        if b >= size {
            let v = b / size;
            return if v < 10.0 { format!("{v:.1} {name}") } else { format!("{v:.0} {name}") };
        }
    }
    format!("{b:.0} B")
}

/// The up-front estimate of a sweep.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Estimate {
    /// Runs to execute.
    pub runs: u64,
    /// Their requests.
    pub requests: u64,
    /// Their output tokens.
    pub output_tokens: u64,
    /// Their work units.
    pub work: u64,
}

/// What the outputs are.
#[derive(Debug, Clone, Copy, Default)]
pub struct OutputsOn {
    /// `--tokens`.
    pub tokens: bool,
    /// `--results-jsonl`.
    pub results_jsonl: bool,
}

impl Estimate {
    /// Seconds on `jobs` cores at [`WORK_PER_CORE_S`].
    pub fn seconds(&self, jobs: usize) -> f64 {
        self.work as f64 / (WORK_PER_CORE_S * jobs.max(1) as f64)
    }

    /// Bytes written.
    pub fn bytes(&self, outputs: OutputsOn) -> f64 {
        let mut b = self.runs as f64 * BYTES_PER_RUN + self.requests as f64 * BYTES_PER_REQUEST;
        if outputs.tokens {
            b += self.output_tokens as f64 * BYTES_PER_TOKEN;
        }
        if outputs.results_jsonl {
            b += self.requests as f64 * BYTES_PER_JSONL_REQUEST;
        }
        b
    }

    /// The line printed before a sweep (`NAME: N runs: R done before, T to
    /// run: ...`), and a warning line past an hour or 10 GB.
    pub fn describe(&self, name: &str, reused: u64, jobs: usize, outputs: OutputsOn) -> (String, Option<String>) {
        let (s, b) = (self.seconds(jobs), self.bytes(outputs));
        let cores = if jobs == 1 { "1 core".to_owned() } else { format!("{jobs} cores") };
        let line = format!(
            "{name}: {} runs: {reused} done before, {} to run: {} requests, {} output tokens; \
             estimated {} on {cores}, {} of tables",
            self.runs + reused,
            self.runs,
            self.requests,
            self.output_tokens,
            format_duration(s),
            format_bytes(b),
        );
        let mut warn = Vec::new();
        if s > WARN_SECONDS {
            warn.push(format!("over an hour ({})", format_duration(s)));
        }
        if b > WARN_BYTES {
            warn.push(format!("over 10 GB ({})", format_bytes(b)));
        }
        let warning = (!warn.is_empty()).then(|| {
            format!("warning: this sweep is estimated to take {}; Ctrl-C stops it, a rerun resumes", warn.join(" and "))
        });
        (line, warning)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{LlmCall, SubRequest};

    fn request(input: u32, output: u32) -> Request {
        let call = LlmCall::new(input, output);
        Request {
            request_id: crate::workload::RequestId::Int(0),
            arrival_time: 0.0,
            initial: vec![0],
            sub_requests: vec![SubRequest { next: vec![], interval: 0.0, kind: NodeKind::Llm(call), result: None }],
            traffic: Default::default(),
        }
    }

    #[test]
    fn work_counts_output_tokens_and_weighted_prompts() {
        assert_eq!(request_work(&request(800, 100)), 200);
        assert_eq!(request_work(&request(0, 1)), 1);
        let mut size = WorkloadSize::default();
        size.add(&request(80, 10));
        size.add(&request(8, 5));
        assert_eq!(size, WorkloadSize { requests: 2, output_tokens: 15, work: 26 });
    }

    #[test]
    fn a_low_concurrency_costs_more_per_token() {
        assert_eq!(load_factor(Some(1)), 4.0);
        assert!((load_factor(Some(64)) - 1.047).abs() < 1e-3);
        assert_eq!(load_factor(None), 1.0);
        assert_eq!(load_factor(Some(0)), 4.0);
    }

    #[test]
    fn eta_scales_elapsed_by_work_left_and_has_no_basis_before_any_work() {
        assert_eq!(eta_s(10.0, 0, 100), None);
        assert_eq!(eta_s(10.0, 25, 100), Some(30.0));
        assert_eq!(eta_s(10.0, 100, 100), Some(0.0));
        // Runs of very different sizes: a quarter of the work in 10 s leaves
        // 30 s whatever the count of runs finished.
        assert_eq!(format_eta(eta_s(10.0, 250, 1000)), "30 s");
        assert_eq!(format_eta(None), "—");
        // Never "0 s" while work is left.
        assert_eq!(format_eta(eta_s(0.1, 999, 1000)), "<1 s");
    }

    #[test]
    fn durations_and_bytes_read_as_a_person_writes_them() {
        assert_eq!(format_duration(12.4), "12 s");
        assert_eq!(format_duration(185.0), "3 m 05 s");
        assert_eq!(format_duration(3725.0), "1 h 02 m");
        assert_eq!(format_bytes(512.0), "512 B");
        assert_eq!(format_bytes(3.44e6), "3.4 MB");
        assert_eq!(format_bytes(21e9), "21 GB");
    }

    #[test]
    fn the_estimate_warns_past_an_hour_or_ten_gigabytes() {
        let small = Estimate { runs: 4, requests: 1000, output_tokens: 100_000, work: 100_000 };
        let (line, warning) = small.describe("t", 0, 2, OutputsOn::default());
        let bytes = format_bytes(4.0 * BYTES_PER_RUN + 1000.0 * BYTES_PER_REQUEST);
        assert_eq!(
            line,
            format!(
                "t: 4 runs: 0 done before, 4 to run: 1000 requests, 100000 output tokens; \
                 estimated <1 s on 2 cores, {bytes} of tables"
            )
        );
        assert_eq!(warning, None);
        let long = Estimate { work: (WORK_PER_CORE_S * 2.0 * 7200.0) as u64, ..small };
        let (_, warning) = long.describe("t", 0, 2, OutputsOn::default());
        assert!(warning.unwrap().contains("over an hour (2 h 00 m)"));
        let big = Estimate { requests: (WARN_BYTES / BYTES_PER_REQUEST) as u64 * 2, ..small };
        let (_, warning) = big.describe("t", 3, 2, OutputsOn::default());
        assert!(warning.unwrap().contains("over 10 GB"));
    }
}
