//! Fuzzing every parser and importer: the workload and result readers, the
//! scenario, model-config, plan and generator-spec loaders, the TraceV2
//! reader and both `convert` importers; and the surfaces built on them: a
//! TraceV2 pair replayed as a pool of sessions (its options mutated too), a
//! plan's capacity search (loaded, and for a share of inputs run end to
//! end), a finished sweep's folder turned into a report, and random
//! workloads simulated with a TraceV2 export that is read back and replayed.
//! Each target is a folder of valid files in `tests/data/fuzz/`; every input
//! is one of them mutated (bytes flipped, inserted, deleted, duplicated,
//! spliced, numbers swapped for extreme ones, structural tokens inserted)
//! and run through the library in a scratch copy of the folder. Whatever the
//! input, the library must return (an error is fine), never panic; what it
//! accepts must survive a round trip (a converted or generated workload is
//! read back by the reader, a simulated result by the result reader, and
//! accepted workloads are simulated), and wherever the harness simulates,
//! the counts add up (see `simulate_counted`).
//!
//! `fuzz_every_parser_briefly` runs in CI; `scripts/fuzz.sh N` runs
//! `fuzz_every_parser_long` with N inputs over all targets in release, and
//! prints per-target counts and the slowest input.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use blis_sweep::arch::ModelArch;
use blis_sweep::calibrate::matrix;
use blis_sweep::calibrate::observed;
use blis_sweep::capacity;
use blis_sweep::latency::StepPricer;
use blis_sweep::metrics::{Metrics, MetricsCollector};
use blis_sweep::output::{TraceV2Server, TraceV2Writer};
use blis_sweep::scenario::{self, ScenarioSpec};
use blis_sweep::sim::{self, Client, FinishedRequest, RunConfig, Sink, Tee};
use blis_sweep::sweep::executor::SweepOptions;
use blis_sweep::sweep::{grid, plan};
use blis_sweep::workload::generate::{GenerateSpec, Generator};
use blis_sweep::workload::import::common::{ImportOptions, SessionMode};
use blis_sweep::workload::import::{self, ImportFormat, blis_vllm_h100, common, llmservingsim};
use blis_sweep::workload::reader::{Format, Reader};
use blis_sweep::workload::writer::write_workload_row;
use blis_sweep::workload::{LlmCall, NodeKind, Request, RequestId, SubRequest};
use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::util::Dir;

/// A fuzz target: a corpus folder, the files in it that are mutated, and
/// what the library does with the folder.
struct Target {
    name: &'static str,
    mutable: &'static [&'static str],
    /// Runs the library over the folder; true when it accepted the input.
    run: fn(&Path) -> bool,
}

const TARGETS: &[Target] = &[
    Target { name: "workload", mutable: &["dag.jsonl", "ids.jsonl"], run: workload },
    Target { name: "results", mutable: &["r.jsonl"], run: results },
    Target {
        name: "scenario",
        mutable: &["linear.yaml", "roofline.yaml", "kernels.yaml", "tiny.json"],
        run: scenarios,
    },
    Target { name: "model-config", mutable: &["dense.json", "moe.json"], run: model_configs },
    Target { name: "plan", mutable: &["plan.yaml", "generated.yaml"], run: plans },
    Target {
        name: "generate",
        mutable: &["preset.yaml", "sessions.yaml", "agentic.yaml", "lengths.txt"],
        run: generator_specs,
    },
    Target { name: "tracev2", mutable: &["t.yaml", "t.csv"], run: tracev2 },
    Target {
        name: "convert-blis",
        mutable: &["experiments.csv", "requests/mini.csv", "aggregates/mini/results_config.yaml"],
        run: convert_blis,
    },
    Target {
        name: "blis-trainval",
        mutable: &["trainval15_experiment_configs.json", "aggregates_trainval.csv"],
        run: blis_trainval,
    },
    Target { name: "silicon", mutable: &["silicon_sample.csv"], run: silicon },
    Target {
        name: "convert-llmservingsim",
        mutable: &["runs/GPU__m/meta.json", "runs/GPU__m/requests.jsonl", "workloads/w.jsonl"],
        run: convert_llmservingsim,
    },
    Target { name: "pool", mutable: &["t.yaml", "t.csv", "pool.yaml"], run: pool },
    Target { name: "search", mutable: &["rate.yaml", "users.yaml", "w.jsonl"], run: search },
    Target {
        name: "report-folder",
        mutable: &[
            "capacity.parquet",
            "runs/2635bda38c250b8c/metrics.json",
            "runs/62664103c469d829/status.json",
            "runs/ea1a526b24ba0707/metrics.json",
        ],
        run: report_folder,
    },
    Target { name: "trace-pair", mutable: &["seed.txt"], run: trace_pair },
    // Importers (`imported`): one target each.
    Target { name: "import-mooncake", mutable: &["m.jsonl"], run: mooncake },
    Target { name: "import-weka", mutable: &["w.jsonl"], run: weka },
    Target { name: "agentx", mutable: &["plan.yaml", "w.jsonl"], run: agentx_plan },
    Target { name: "import-vllm-bench", mutable: &["b.json"], run: vllm_bench },
    Target { name: "import-sharegpt", mutable: &["c.json"], run: sharegpt },
    Target { name: "import-csv", mutable: &["t.csv"], run: csv_rows },
    Target { name: "import-inference-perf", mutable: &["c.yaml"], run: inference_perf },
    Target { name: "import-otel", mutable: &["t.json"], run: otel },
    Target { name: "import-servegen", mutable: &["chunk-1-trace.csv", "chunk-1-dataset.json"], run: servegen },
];

fn read(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).unwrap_or_default()
}

fn workload(dir: &Path) -> bool {
    let mut ok = true;
    for name in ["dag.jsonl", "ids.jsonl"] {
        let bytes = read(dir, name);
        let rows: Result<Vec<_>, _> = Reader::new(&bytes[..], name, Format::Workload).collect();
        match rows {
            Ok(rows) if rows.len() <= 64 => simulate(rows),
            Ok(_) => {}
            Err(e) => {
                assert!(e.line >= 1, "{e}");
                one_line(&e.to_string(), name);
                ok = false;
            }
        }
    }
    ok
}

/// The small linear deployment every simulating target runs on.
fn deployment() -> &'static scenario::Deployment {
    static DEPLOYMENT: std::sync::OnceLock<scenario::Deployment> = std::sync::OnceLock::new();
    DEPLOYMENT.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz/scenario/linear.yaml");
        scenario::load(&path).unwrap()
    })
}

/// Simulates accepted rows on a small engine (open loop, then a client
/// timeout) and reads the results back.
fn simulate(rows_in: Vec<blis_sweep::workload::Request>) {
    let d = deployment();
    for timeout_us in [None, Some(50_000)] {
        let config = RunConfig { timeout_us, step_trace: true, ..d.run_config() };
        simulate_counted(config, &rows_in, &mut None::<Rows>);
    }
}

/// Result rows as the result writer writes them.
struct Rows(Vec<u8>);

impl Sink for Rows {
    fn request_done(&mut self, r: &FinishedRequest) -> std::io::Result<()> {
        blis_sweep::output::result_row(&mut self.0, r);
        Ok(())
    }
}

/// Simulates `requests` (also into `extra`, e.g. a trace writer) and checks
/// that the counts add up: the metrics collector puts every injected request
/// in exactly one of completed, unservable, unfinished, timed out and
/// rejected (`MetricsCollector::observe` matches on the request's one
/// status); every request read is injected, but for the one a horizon
/// stopped at (`Simulation::add_request` reads it, then declines it); and
/// the result rows written are as many as injected and read back. `None`
/// when the run stopped because a sum of times passed the simulator's clock
/// (an error the run reports, not a count to check).
fn simulate_counted(config: RunConfig<StepPricer>, requests: &[Request], extra: &mut dyn Sink) -> Option<Metrics> {
    let horizon = config.horizon_us.is_some();
    let mut metrics = MetricsCollector::default();
    let mut rows = Rows(Vec::new());
    let source = requests.iter().cloned().map(Ok::<_, ()>);
    let end = match sim::run(config, source, &mut Tee(&mut metrics, Tee(&mut rows, extra))) {
        Ok(end) => end,
        Err(sim::RunError::Sink(e)) => panic!("a sink refused a simulated request: {e}"),
        Err(sim::RunError::Source(())) => unreachable!("the source never fails"),
        Err(sim::RunError::Clock(_)) => return None,
    };
    let m = metrics.finish(&end);
    counts_add_up(&m);
    let read = end.requests;
    assert!(
        m.injected_requests == read || (horizon && m.injected_requests + 1 == read),
        "{read} requests read, {} injected",
        m.injected_requests
    );
    if !horizon {
        assert_eq!(read, requests.len() as u64, "without a horizon every request is read");
    }
    let mut back = 0u64;
    for row in Reader::new(&rows.0[..], "results", Format::Results) {
        if let Err(e) = row {
            panic!("a simulated result is rejected by the result reader: {e}");
        }
        back += 1;
    }
    assert_eq!(back, m.injected_requests, "result rows read back vs requests injected");
    Some(m)
}

/// Every injected request is in exactly one bucket.
fn counts_add_up(m: &Metrics) {
    let buckets =
        m.completed_requests + m.dropped_unservable + m.still_unfinished + m.timed_out_requests + m.rejected_requests;
    assert_eq!(
        m.injected_requests,
        buckets,
        "injected {} != completed {} + unservable {} + unfinished {} + timed out {} + rejected {}",
        m.injected_requests,
        m.completed_requests,
        m.dropped_unservable,
        m.still_unfinished,
        m.timed_out_requests,
        m.rejected_requests
    );
}

fn results(dir: &Path) -> bool {
    let bytes = read(dir, "r.jsonl");
    let _ = Reader::new(&bytes[..], "r.jsonl", Format::Results).count();
    observed::from_results(&bytes[..], "r.jsonl").is_ok()
}

fn scenarios(dir: &Path) -> bool {
    let mut ok = true;
    for name in ["linear.yaml", "roofline.yaml", "kernels.yaml"] {
        let path = dir.join(name);
        if let Err(e) = scenario::load(&path) {
            one_line(&e.to_string(), &path.display().to_string());
            ok = false;
        }
    }
    ok
}

fn model_configs(dir: &Path) -> bool {
    let mut ok = true;
    for name in ["dense.json", "moe.json"] {
        let text = String::from_utf8_lossy(&read(dir, name)).into_owned();
        ok &= ModelArch::from_config_json(name, &text).is_ok();
        if ok {
            // Priced by both latency models on two GPUs, capacity computed.
            for (gpu, kind) in [("H100", "kernels"), ("L40S", "roofline")] {
                let yaml = format!("model_config: {name}\nhardware: {gpu}\ntp: 2\nlatency_model: {{kind: {kind}}}\n");
                let spec: ScenarioSpec = blis_sweep::yaml::parse(&yaml).unwrap();
                let _ = scenario::resolve(spec, dir, "fuzz");
            }
        }
    }
    ok
}

fn plans(dir: &Path) -> bool {
    let mut ok = true;
    for name in ["plan.yaml", "generated.yaml"] {
        let path = dir.join(name);
        let text = String::from_utf8_lossy(&read(dir, name)).into_owned();
        let result = if matrix::is_calibration_plan(&text) {
            matrix::load(&path).map(|_| ())
        } else {
            grid::load(&path).map(|_| ())
        };
        if let Err(e) = result {
            one_line(&e.to_string(), &dir.display().to_string());
            ok = false;
        }
    }
    ok
}

fn generator_specs(dir: &Path) -> bool {
    let mut ok = true;
    for name in ["preset.yaml", "sessions.yaml", "agentic.yaml"] {
        let text = String::from_utf8_lossy(&read(dir, name)).into_owned();
        let Ok(spec) = blis_sweep::yaml::parse::<GenerateSpec>(&text) else {
            ok = false;
            continue;
        };
        let Ok(g) = Generator::new(&spec, dir) else {
            ok = false;
            continue;
        };
        let mut out = Vec::new();
        for r in g.requests(7).take(8) {
            match r {
                Ok(r) => write_workload_row(&mut out, &r),
                Err(_) => {
                    ok = false;
                    break;
                }
            }
        }
        read_back(&out, "generated");
    }
    ok
}

/// An error message starts with `prefix` (the file, and the line where
/// there is one) and names no line 0. (Control characters from the input,
/// a newline in a key, are escaped where the CLI prints the message.)
fn one_line(message: &str, prefix: &str) {
    assert!(message.starts_with(prefix), "a message does not start with {prefix:?}: {message:?}");
    let rest = &message[prefix.len()..];
    assert!(!rest.starts_with(":0:") && !rest.starts_with("0:"), "a message names line 0: {message:?}");
}

/// What a generator or converter wrote must be what the reader accepts.
fn read_back(jsonl: &[u8], what: &str) {
    for row in Reader::new(jsonl, what, Format::Workload) {
        if let Err(e) = row {
            panic!("{what}: the reader rejects what was written: {e}");
        }
    }
}

/// An importer's target: `file` of `dir` opened as `format` with
/// `options`; what it accepts is written as workload JSONL and read back,
/// and (when small) simulated. Every importer's target is this with its
/// format, file and options.
fn imported(dir: &Path, format: ImportFormat, file: &str, options: &ImportOptions) -> bool {
    let path = dir.join(file);
    let rows: Result<Vec<Request>, _> = import::open(format, &path, options).and_then(|rows| rows.take(256).collect());
    match rows {
        Ok(rows) => {
            let mut out = Vec::new();
            for r in &rows {
                write_workload_row(&mut out, r);
            }
            read_back(&out, format.name());
            if rows.len() <= 64 {
                simulate(rows);
            }
            true
        }
        Err(e) => {
            one_line(&e.to_string(), &dir.display().to_string());
            false
        }
    }
}

fn mooncake(dir: &Path) -> bool {
    imported(dir, ImportFormat::Mooncake, "m.jsonl", &ImportOptions::default())
}

fn weka(dir: &Path) -> bool {
    let options = ImportOptions { session_rate: Some(0.5), ..ImportOptions::default() };
    imported(dir, ImportFormat::Weka, "w.jsonl", &options)
        && imported(dir, ImportFormat::Weka, "w.jsonl", &ImportOptions { drop_subagents: true, ..options })
}

fn vllm_bench(dir: &Path) -> bool {
    imported(dir, ImportFormat::VllmBench, "b.json", &ImportOptions::default())
}

fn sharegpt(dir: &Path) -> bool {
    imported(dir, ImportFormat::Sharegpt, "c.json", &ImportOptions { session_rate: Some(1.0), ..Default::default() })
}

fn csv_rows(dir: &Path) -> bool {
    imported(dir, ImportFormat::Csv, "t.csv", &ImportOptions::default())
}

/// An AgentX plan: loaded, its corpus read, and (when small) each of its
/// loads run on the harness's deployment: never more plays out than lanes.
fn agentx_plan(dir: &Path) -> bool {
    let plan = match grid::load(&dir.join("plan.yaml")) {
        Ok(p) => p,
        Err(e) => {
            one_line(&e.to_string(), &dir.display().to_string());
            return false;
        }
    };
    for source in std::iter::once(&plan.workload).chain(&plan.workloads) {
        let blis_sweep::sweep::source::WorkloadSource::Import { path, options, .. } = source else { continue };
        let Some(agentic) = &options.agentic else { continue };
        let corpus = match blis_sweep::workload::import::weka::load(path) {
            Ok(c) => c,
            Err(e) => {
                one_line(&e.to_string(), &dir.display().to_string());
                return false;
            }
        };
        if blis_sweep::agentx::check_corpus(&corpus).is_err() || agentic.profile_us > 60_000_000 || agentic.lanes > 4 {
            continue;
        }
        let config = deployment().run_config();
        match blis_sweep::agentx::run(&config, corpus.into(), agentic, 1, &mut None::<Rows>) {
            Ok((report, end)) => {
                assert!(report.max_plays_in_flight <= u64::from(agentic.lanes), "{report:?}");
                assert!(
                    end.sim_end_us <= (report.warmup_end_s * 1e6) as u64 + agentic.profile_us + agentic.grace_us + 1
                );
            }
            Err(blis_sweep::agentx::AgentxError::Clock(_) | blis_sweep::agentx::AgentxError::WarmupNeverEnds(_)) => {}
            Err(e) => panic!("an AgentX run failed: {e}"),
        }
    }
    true
}

fn inference_perf(dir: &Path) -> bool {
    imported(dir, ImportFormat::InferencePerf, "c.yaml", &ImportOptions::default())
}

fn otel(dir: &Path) -> bool {
    imported(dir, ImportFormat::Otel, "t.json", &ImportOptions::default())
}

fn servegen(dir: &Path) -> bool {
    imported(dir, ImportFormat::Servegen, "chunk-1-trace.csv", &ImportOptions::default())
}

fn tracev2(dir: &Path) -> bool {
    let result = observed::from_trace(&dir.join("t.yaml"), &dir.join("t.csv"));
    if let Err(e) = &result {
        one_line(&e.to_string(), &dir.display().to_string());
    }
    result.is_ok()
}

fn converted(c: &common::Converted, what: &str) {
    let mut out = Vec::new();
    for r in &c.workload {
        write_workload_row(&mut out, r);
    }
    read_back(&out, what);
    for row in Reader::new(&c.baseline_jsonl()[..], what, Format::Results) {
        if let Err(e) = row {
            panic!("{what}: the result reader rejects the baseline: {e}");
        }
    }
}

fn convert_blis(dir: &Path) -> bool {
    let c = blis_vllm_h100::blis_vllm_h100(dir, "mini");
    match &c {
        Ok(c) => converted(c, "convert blis-vllm-h100"),
        Err(e) => one_line(&e.to_string(), &dir.display().to_string()),
    }
    c.is_ok()
}

fn convert_llmservingsim(dir: &Path) -> bool {
    let c = llmservingsim::llmservingsim(dir, "GPU__m");
    match &c {
        Ok(c) => converted(c, "convert llmservingsim"),
        Err(e) => one_line(&e.to_string(), &dir.display().to_string()),
    }
    c.is_ok()
}

/// An aggregate-only source: its runs listed, the first four loaded and
/// checked by `check`, or refused in one line.
fn list_and_load<T>(
    dir: &Path,
    list: fn(&Path) -> Result<Vec<String>, common::ConvertError>,
    load: fn(&Path, &str) -> Result<T, common::ConvertError>,
    check: fn(&T),
) -> bool {
    let refused = |e: common::ConvertError| one_line(&e.to_string(), &dir.display().to_string());
    let names = match list(dir) {
        Ok(n) => n,
        Err(e) => {
            refused(e);
            return false;
        }
    };
    let mut ok = true;
    for name in names.iter().take(4) {
        match load(dir, name) {
            Ok(run) => check(&run),
            Err(e) => {
                refused(e);
                ok = false;
            }
        }
    }
    ok
}

/// BLIS's aggregate-only training runs, each loaded into a workload the
/// reader accepts.
fn blis_trainval(dir: &Path) -> bool {
    use blis_sweep::workload::import::blis_trainval;
    list_and_load(dir, blis_trainval::list, blis_trainval::load, |run| {
        let mut out = Vec::new();
        for r in &run.workload {
            write_workload_row(&mut out, r);
        }
        read_back(&out, "blis-trainval");
    })
}

/// aiconfigurator's measured deployments.
fn silicon(dir: &Path) -> bool {
    use blis_sweep::workload::import::silicon;
    list_and_load(dir, silicon::list, |d, n| silicon::load(d, n, blis_sweep::calibrate::replay::kv_blocks), |_| {})
}

/// Sessions a pool may ask for before the harness skips the input: the
/// corpus has five sessions, so 10,000 is 2,000 clones of it, enough to
/// reach every path of the pool while one input stays well under a second.
/// (The CLI's own bound on `--total-sessions` is far higher; this cap keeps
/// the harness fast, not the tool safe.)
const POOL_MAX_SESSIONS: u32 = 10_000;

/// `pool.yaml`, read leniently (`key: value` lines; a value that does not
/// parse leaves the option unset), so the mutator varies the options too.
fn pool_options(text: &str) -> ImportOptions {
    let mut o = ImportOptions::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        match key.trim() {
            "concurrent_sessions" => o.concurrent_sessions = value.parse().ok(),
            "total_sessions" => o.total_sessions = value.parse().ok(),
            "session_mode" => o.session_mode = SessionMode::parse(value).ok(),
            "shuffle_corpus" => o.shuffle_corpus = value == "true",
            "seed" => o.seed = value.parse().unwrap_or(0),
            _ => {}
        }
    }
    o
}

/// The client and horizon `run` gives an imported TraceV2 replay
/// (`replay_defaults` in src/cli/run.rs): a pool is a capped client that
/// runs until the pool drains; otherwise the horizon is twice the last
/// arrival (600 s when every arrival is at 0).
fn replay_config(requests: &[Request], options: &ImportOptions) -> RunConfig<StepPricer> {
    let mut config = RunConfig { step_trace: true, ..deployment().run_config() };
    match options.concurrent_sessions {
        Some(limit) => config.client = Client::Capped { limit },
        None => {
            let last = requests.iter().map(Request::arrival_us).max().unwrap_or(0);
            config.horizon_us = Some(if last == 0 { 600_000_000 } else { last.saturating_mul(2) });
        }
    }
    config
}

/// Opens a TraceV2 pair through the import API; every row or the error.
fn import_trace(header: &Path, options: &ImportOptions) -> Result<Vec<Request>, common::ImportError> {
    import::open(ImportFormat::TraceV2, header, options)?.collect()
}

/// A TraceV2 pair replayed as a pool of sessions (or as the mutated options
/// say), the accepted requests simulated and read back.
fn pool(dir: &Path) -> bool {
    let options = pool_options(&String::from_utf8_lossy(&read(dir, "pool.yaml")));
    if options.total_sessions.is_some_and(|n| n > POOL_MAX_SESSIONS) {
        return false;
    }
    match import_trace(&dir.join("t.yaml"), &options) {
        Ok(requests) => {
            if let (Some(_), Some(total)) = (options.concurrent_sessions, options.total_sessions) {
                assert_eq!(requests.len(), total as usize, "a pool of {total} sessions");
            }
            simulate_counted(replay_config(&requests, &options), &requests, &mut None::<Rows>);
            true
        }
        Err(e) => {
            one_line(&e.to_string(), &dir.display().to_string());
            false
        }
    }
}

/// One accepted, cheap search plan in this many is run end to end.
const SEARCH_ONE_IN: u64 = 16;

/// Searches started, those that answered (the others refused the mutated
/// workload or plan on the way) and their probes, for the long run's report.
static SEARCHES: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

/// Whether a capacity search of this plan is cheap enough to run: one or
/// two deployments, few probes (a coarse precision over a narrow range), a
/// small workload. Capacity searches are ~10 probes of full sweep runs
/// (tables written), so they run for one accepted plan in [`SEARCH_ONE_IN`] (chosen by
/// the input's bytes, so a saved input replays the same).
fn search_is_cheap(plan: &grid::Plan, search: &plan::Search, bytes: &[u8]) -> bool {
    let (lo, hi) = search.range;
    let narrow = match search.over {
        plan::Over::Rate => hi / lo <= 1e3,
        plan::Over::Concurrency => hi <= 32.0,
    };
    plan.cells.len() <= 2
        && search.precision >= 0.05
        && narrow
        && bytes.len() <= 16 << 10
        && blis_sweep::hash::hash64(bytes).is_multiple_of(SEARCH_ONE_IN)
}

/// A plan with a `search:` block loaded through the library; when cheap, the
/// search run end to end in a scratch output folder, the counts of every
/// deployment's answer checked, `capacity.parquet` and the report written.
fn search(dir: &Path) -> bool {
    let mut ok = true;
    for name in ["rate.yaml", "users.yaml"] {
        let path = dir.join(name);
        let mut plan = match grid::load(&path) {
            Ok(p) => p,
            Err(e) => {
                one_line(&e.to_string(), &dir.display().to_string());
                ok = false;
                continue;
            }
        };
        let Some(search) = plan.search.clone() else { continue };
        let bytes = [read(dir, name), read(dir, "w.jsonl")].concat();
        if !search_is_cheap(&plan, &search, &bytes) {
            continue;
        }
        // Always the scratch folder, whatever the mutated `output:` says.
        plan.output = dir.join("out");
        let _ = std::fs::remove_dir_all(&plan.output);
        let options = SweepOptions {
            jobs: 1,
            force: true,
            tokens: false,
            results_jsonl: false,
            step_trace: false,
            shard: None,
            keep_other_runs: true,
            progress: None,
        };
        SEARCHES[0].fetch_add(1, Ordering::Relaxed);
        let probes = |_: capacity::Probe<'_>| {
            SEARCHES[2].fetch_add(1, Ordering::Relaxed);
        };
        let Ok(rows) = capacity::search(plan.clone(), &search, &options, &mut { probes }) else { continue };
        SEARCHES[1].fetch_add(1, Ordering::Relaxed);
        for m in rows.iter().filter_map(|r| r.metrics.as_ref()) {
            counts_add_up(m);
        }
        // Every probe's counts, as the sweep wrote them.
        for run in std::fs::read_dir(plan.output.join("runs")).into_iter().flatten().flatten() {
            let Ok(text) = std::fs::read_to_string(run.path().join("metrics.json")) else { continue };
            let m: serde_json::Value = serde_json::from_str(&text).unwrap();
            let n = |k: &str| m[k].as_u64().unwrap_or_else(|| panic!("{}: {k}", run.path().display()));
            let buckets = ["completed_requests", "dropped_unservable", "still_unfinished", "timed_out_requests"];
            assert_eq!(
                n("injected_requests"),
                buckets.iter().map(|k| n(k)).sum::<u64>() + n("rejected_requests"),
                "{}: the counts do not add up",
                run.path().display()
            );
        }
        if capacity::write(&plan, &search, &rows).is_ok()
            && let Err(e) = blis_sweep::report::write(&plan.output)
        {
            one_line(&e.to_string(), &dir.display().to_string());
        }
    }
    ok
}

/// A finished capacity search's folder (its manifest, runs' metrics and
/// statuses, `capacity.parquet`) mutated: the report is written
/// or refused with a message that starts with a path in the folder.
/// (Missing or corrupt metrics may be either: both are accepted here.)
fn report_folder(dir: &Path) -> bool {
    match blis_sweep::report::write(dir) {
        Ok(_) => true,
        Err(e) => {
            one_line(&e.to_string(), &dir.display().to_string());
            false
        }
    }
}

/// Whether `trace_pair` asserts that a replayed export measures what the
/// run measured (TTFT, ITL and E2E means, prefix-cache hit rate): on since
/// the exact TraceV2 round trip (issue 22, item 5). Before it, 198 of 200
/// pairs differed (e.g. TTFT mean 1.36 ms run, 1.43 ms replayed: the shared
/// prefixes were lost).
const ASSERT_ROUND_TRIP_EQUAL: bool = true;

/// The replay compared with the run: closed loop, where a session is one
/// request again (replayed at recorded times, each record is its own
/// request, so E2E and the request count differ by construction).
const ROUND_TRIP_MODE: Option<SessionMode> = Some(SessionMode::ClosedLoop);

/// The run and its replay measure the same, within 0.5 % (the issue's
/// bound) plus 0.001 (1 µs of a mean in ms; 0.1 point of a hit rate).
fn assert_round_trip_equal(run: &Metrics, replay: &Metrics) {
    let close = |what: &str, a: f64, b: f64| {
        assert!((a - b).abs() <= 0.005 * a.abs().max(b.abs()) + 1e-3, "{what}: run {a}, replay {b}");
    };
    assert_eq!(run.injected_requests, replay.injected_requests, "requests");
    close("TTFT mean (ms)", run.ttft_mean_ms, replay.ttft_mean_ms);
    close("ITL mean (ms)", run.itl_mean_ms, replay.itl_mean_ms);
    close("E2E mean (ms)", run.e2e_mean_ms, replay.e2e_mean_ms);
    close("hit rate", run.kv_cache_hit_rate, replay.kv_cache_hit_rate);
}

/// A random small workload from `rng`: up to 12 requests (arrival gaps
/// sometimes zero), each a chain of up to 4 llm calls with tool calls between
/// some of them and sometimes after the last, or (three in ten) the same
/// nodes wired as a DAG that forks and joins, intervals (the root's too)
/// zero or not, prompts given by
/// token ids that start with one of three shared prefixes or continue the
/// previous call's (an agent's growing context), or by length alone.
fn random_workload(rng: &mut Xoshiro256PlusPlus) -> Vec<Request> {
    let prefixes: Vec<Vec<u32>> =
        (0..3).map(|_| (0..rng.random_range(16..=128)).map(|_| rng.random_range(0..32_000)).collect()).collect();
    let fresh = |rng: &mut Xoshiro256PlusPlus, n: std::ops::RangeInclusive<usize>| {
        let n = rng.random_range(n);
        (0..n).map(|_| rng.random_range(0..32_000u32)).collect::<Vec<_>>()
    };
    let seconds = |rng: &mut Xoshiro256PlusPlus, max_us: u64| {
        if rng.random_bool(0.4) { 0.0 } else { rng.random_range(1..=max_us) as f64 / 1e6 }
    };
    let mut t_us = 0u64;
    let mut out = Vec::new();
    for i in 0..rng.random_range(1..=12u64) {
        if rng.random_bool(0.7) {
            t_us += rng.random_range(0..2_000_000);
        }
        let mut nodes: Vec<SubRequest> = Vec::new();
        let mut previous: Option<Vec<u32>> = None;
        for c in 0..rng.random_range(1..=4) {
            if c > 0 && rng.random_bool(0.3) {
                let duration = seconds(rng, 500_000);
                nodes.push(SubRequest {
                    next: vec![],
                    interval: 0.0,
                    kind: NodeKind::ToolCall { duration },
                    result: None,
                });
            }
            let ids = match (rng.random_range(0..4), &previous) {
                (0, _) => None,
                (1, Some(p)) => Some([&p[..], &fresh(rng, 1..=64)].concat()),
                _ => {
                    let p = &prefixes[rng.random_range(0..prefixes.len())];
                    Some([&p[..], &fresh(rng, 0..=200)].concat())
                }
            };
            let input_tokens = ids.as_ref().map_or_else(|| rng.random_range(1..=300), |v| v.len() as u32);
            previous = ids.clone();
            let call = LlmCall::new(input_tokens, rng.random_range(1..=40)).with_input_ids(ids);
            let interval = seconds(rng, 1_000_000);
            nodes.push(SubRequest { next: vec![], interval, kind: NodeKind::Llm(call), result: None });
        }
        if rng.random_bool(0.2) {
            // A trailing tool call: a wait after the last llm call.
            let duration = seconds(rng, 500_000);
            nodes.push(SubRequest { next: vec![], interval: 0.0, kind: NodeKind::ToolCall { duration }, result: None });
        }
        let n = nodes.len();
        let mut initial = vec![0u32];
        if n > 2 && rng.random_bool(0.3) {
            // A DAG: each later node waits for one or two earlier ones, or
            // none (another root): forks and joins.
            for k in 1..n {
                let preds: Vec<usize> = match rng.random_range(0..7) {
                    0 => Vec::new(),
                    1 | 2 => vec![rng.random_range(0..k), rng.random_range(0..k)],
                    _ => vec![rng.random_range(0..k)],
                };
                if preds.is_empty() {
                    initial.push(k as u32);
                }
                for p in preds {
                    if !nodes[p].next.contains(&(k as u32)) {
                        nodes[p].next.push(k as u32);
                    }
                }
            }
            for node in &mut nodes {
                node.next.sort_unstable();
            }
        } else {
            for k in 1..n {
                nodes[k - 1].next = vec![k as u32];
            }
        }
        out.push(Request {
            traffic: Default::default(),
            request_id: RequestId::Int(i),
            arrival_time: t_us as f64 / 1e6,
            initial,
            sub_requests: nodes,
        });
    }
    out
}

/// A random workload (seeded by the input's bytes) simulated with a TraceV2
/// export, as `run --trace-output` wires it; the pair read back through the
/// import API and replayed as `run --input tracev2:` does (recorded times),
/// and closed loop. The export must be accepted; see
/// [`ASSERT_ROUND_TRIP_EQUAL`] for the measurements.
fn trace_pair(dir: &Path) -> bool {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(blis_sweep::hash::hash64(&read(dir, "seed.txt")));
    let generated = random_workload(&mut rng);
    // Through the workload writer and reader, which check the DAGs.
    let mut jsonl = Vec::new();
    for r in &generated {
        write_workload_row(&mut jsonl, r);
    }
    let requests: Vec<Request> = Reader::new(&jsonl[..], "trace-pair", Format::Workload)
        .map(|r| r.unwrap_or_else(|e| panic!("the generated workload is rejected: {e}")))
        .collect();
    let d = deployment();
    let (mut header, mut data) = (Vec::new(), Vec::new());
    let (header_path, data_path) = (dir.join("t.yaml"), dir.join("t.csv"));
    let run = {
        let server = TraceV2Server::from(d);
        let mut writer = TraceV2Writer::new(
            (&mut header as &mut dyn std::io::Write, header_path.display().to_string()),
            (&mut data as &mut dyn std::io::Write, data_path.display().to_string()),
            false,
            server,
        );
        match simulate_counted(RunConfig { step_trace: true, ..d.run_config() }, &requests, &mut writer) {
            Some(m) => m,
            None => return false,
        }
    };
    std::fs::write(&header_path, &header).unwrap();
    std::fs::write(&data_path, &data).unwrap();
    for mode in [None, Some(SessionMode::ClosedLoop)] {
        let options = ImportOptions { session_mode: mode, ..ImportOptions::default() };
        let replayed = import_trace(&header_path, &options)
            .unwrap_or_else(|e| panic!("the reader rejects the exported pair ({mode:?}): {e}"));
        // The run had no horizon: neither has the replay that is compared
        // (as `run --input` is given the run's `--horizon`, or a long one).
        let mut config = replay_config(&replayed, &options);
        if mode == ROUND_TRIP_MODE {
            config.horizon_us = None;
        }
        let replay = simulate_counted(config, &replayed, &mut None::<Rows>);
        if ASSERT_ROUND_TRIP_EQUAL && mode == ROUND_TRIP_MODE {
            let replay = replay.unwrap_or_else(|| panic!("the replay passed the clock where the run did not"));
            assert_round_trip_equal(&run, &replay);
        }
    }
    true
}

/// Values and tokens that once broke parsers, or sit on a boundary.
const TOKENS: &[&str] = &[
    "-1",
    "0",
    "-0",
    "1e308",
    "-1e308",
    "1e999",
    "5e-324",
    "1e-320",
    "2e13",
    "NaN",
    "Infinity",
    ".nan",
    ".inf",
    "-.inf",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999",
    "0.5",
    "null",
    "true",
    "\"\"",
    "\"1\"",
    "\"0\"",
    "[]",
    "{}",
    "[",
    "{",
    "]",
    "}",
    ",",
    ":",
    "\"",
    "\n",
    "\r\n",
    "\t",
    "\u{1b}[31m",
    "\\u0000",
    "\u{0}",
    "é",
    "\u{feff}",
    "&a ",
    "*a",
    "!!binary ",
    "- ",
    "---\n",
    "...\n",
    "# ",
    "~",
    "<<: ",
    "? ",
    "|\n",
    "\"kind\":\"tool_call\"",
    "\"next\":[0]",
    "\"request_id\":0",
];

fn mutate(rng: &mut Xoshiro256PlusPlus, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    // Half the inputs carry one mutation, so most stay well-formed enough to
    // reach the checks behind the parser; the rest stack up to six.
    let mutations = if rng.random_bool(0.5) { 1 } else { rng.random_range(2..=6) };
    for _ in 0..mutations {
        let at = |rng: &mut Xoshiro256PlusPlus, v: &[u8]| rng.random_range(0..=v.len());
        match rng.random_range(0..11) {
            // A number replaced by an extreme or boundary one: the file stays
            // valid JSON/YAML/CSV and reaches the range checks.
            9 | 10 => {
                let digits: Vec<usize> =
                    (0..v.len()).filter(|&i| v[i].is_ascii_digit() && (i == 0 || !v[i - 1].is_ascii_digit())).collect();
                if !digits.is_empty() {
                    let i = digits[rng.random_range(0..digits.len())];
                    let mut j = i;
                    while j < v.len() && (v[j].is_ascii_digit() || b".e-+".contains(&v[j])) {
                        j += 1;
                    }
                    let number = TOKENS[rng.random_range(0..20)].as_bytes();
                    v.splice(i..j, number.iter().copied());
                }
            }
            0 if !v.is_empty() => {
                let i = rng.random_range(0..v.len());
                v[i] = rng.random();
            }
            1 => {
                let i = at(rng, &v);
                v.insert(i, rng.random());
            }
            2 if !v.is_empty() => {
                let i = rng.random_range(0..v.len());
                let n = rng.random_range(1..=16).min(v.len() - i);
                v.drain(i..i + n);
            }
            3 | 4 => {
                let token = TOKENS[rng.random_range(0..TOKENS.len())].as_bytes();
                let i = at(rng, &v);
                // Half the time in place of the number or word there.
                let mut j = i;
                if rng.random_bool(0.5) {
                    while j < v.len() && (v[j].is_ascii_alphanumeric() || b".-+_".contains(&v[j])) {
                        j += 1;
                    }
                }
                v.splice(i..j, token.iter().copied());
            }
            5 if !v.is_empty() => {
                let i = rng.random_range(0..v.len());
                let n = rng.random_range(1..=64).min(v.len() - i);
                let chunk = v[i..i + n].to_vec();
                let k = at(rng, &v);
                for _ in 0..rng.random_range(1..=4) {
                    v.splice(k..k, chunk.iter().copied());
                }
            }
            6 if !other.is_empty() => {
                let i = at(rng, &v);
                let j = rng.random_range(0..other.len());
                v.truncate(i);
                v.extend_from_slice(&other[j..]);
            }
            7 => {
                let i = at(rng, &v);
                v.truncate(i);
            }
            _ => {
                // A digit changed: counts, indices and times nudged.
                if let Some(i) = (0..8)
                    .map(|_| rng.random_range(0..v.len().max(1)))
                    .find(|&i| v.get(i).is_some_and(u8::is_ascii_digit))
                {
                    v[i] = b'0' + rng.random_range(0..10u8);
                }
            }
        }
    }
    v
}

thread_local! {
    /// Set while a fuzz input runs: its panic is recorded, not printed.
    static FUZZING: Cell<bool> = const { Cell::new(false) };
}
static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if FUZZING.with(Cell::get) {
                PANICS.lock().unwrap().push(info.to_string());
            } else {
                default(info);
            }
        }));
    });
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// What one target's run found.
struct Outcome {
    inputs: u64,
    accepted: u64,
    slowest: Duration,
    slowest_input: Vec<u8>,
    /// Time spent in the target, all inputs.
    total: Duration,
    failures: Vec<(PathBuf, String)>,
}

/// Runs `inputs` mutated inputs through `target`; a panicking input is
/// saved under `target/fuzz-failures/` for replay.
fn fuzz(target: &Target, inputs: u64, seed: u64) -> Outcome {
    install_panic_hook();
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz").join(target.name);
    let dir = Dir::new(&format!("fuzz-{}", target.name));
    copy_dir(&corpus, &dir.path);
    let originals: Vec<Vec<u8>> = target.mutable.iter().map(|f| read(&corpus, f)).collect();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ blis_sweep::hash::hash64(target.name.as_bytes()));
    let mut outcome = Outcome {
        inputs: 0,
        accepted: 0,
        slowest: Duration::ZERO,
        slowest_input: Vec::new(),
        total: Duration::ZERO,
        failures: Vec::new(),
    };
    for n in 0..inputs {
        let k = rng.random_range(0..target.mutable.len());
        let other = &originals[rng.random_range(0..originals.len())];
        let input = mutate(&mut rng, &originals[k], other);
        let path = dir.join(target.mutable[k]);
        std::fs::write(&path, &input).unwrap();
        FUZZING.with(|f| f.set(true));
        let started = Instant::now();
        let result = std::panic::catch_unwind(|| (target.run)(&dir.path));
        let took = started.elapsed();
        FUZZING.with(|f| f.set(false));
        outcome.total += took;
        if took > outcome.slowest {
            outcome.slowest = took;
            outcome.slowest_input = input.clone();
        }
        outcome.accepted += u64::from(result.as_ref().is_ok_and(|&ok| ok));
        if result.is_err() {
            let message = PANICS.lock().unwrap().pop().unwrap_or_default();
            let saved = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-failures").join(format!(
                "{}-{n}-{}",
                target.name,
                target.mutable[k].replace('/', "_")
            ));
            std::fs::create_dir_all(saved.parent().unwrap()).unwrap();
            std::fs::write(&saved, &input).unwrap();
            outcome.failures.push((saved, message));
        }
        std::fs::write(&path, &originals[k]).unwrap();
        outcome.inputs += 1;
    }
    outcome
}

fn report(outcomes: &[(&Target, Outcome)]) -> String {
    let mut text = String::new();
    for (t, o) in outcomes {
        let preview: String = String::from_utf8_lossy(&o.slowest_input).chars().take(80).collect();
        text.push_str(&format!(
            "{:<22} {:>9} inputs  {:>4.1} % accepted  {:>3} panics  {:>6.1} s  slowest {:>8.2} ms ({:?}…)\n",
            t.name,
            o.inputs,
            100.0 * o.accepted as f64 / o.inputs.max(1) as f64,
            o.failures.len(),
            o.total.as_secs_f64(),
            o.slowest.as_secs_f64() * 1e3,
            preview
        ));
        for (path, message) in o.failures.iter().take(3) {
            text.push_str(&format!("    {}: {message}\n", path.display()));
        }
    }
    text
}

fn fuzz_all(total: u64, seed: u64) -> (String, bool) {
    // `BLIS_FUZZ_TARGETS=a,b` runs only those targets.
    let only = std::env::var("BLIS_FUZZ_TARGETS").ok();
    let targets: Vec<&Target> =
        TARGETS.iter().filter(|t| only.as_deref().is_none_or(|o| o.split(',').any(|n| n == t.name))).collect();
    let per = total.div_ceil(targets.len().max(1) as u64);
    let outcomes: Vec<(&Target, Outcome)> = targets.into_iter().map(|t| (t, fuzz(t, per, seed))).collect();
    let clean = outcomes.iter().all(|(_, o)| o.failures.is_empty());
    (report(&outcomes), clean)
}

/// What the pool target found first: a data file of the header row alone
/// asked to fill a pool divided by its zero sessions.
#[test]
fn a_pool_of_an_empty_trace_is_refused() {
    let dir = Dir::new("fuzz-empty-pool");
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz/pool");
    copy_dir(&corpus, &dir.path);
    let header_row = read(&corpus, "t.csv").split(|&b| b == b'\n').next().unwrap().to_vec();
    std::fs::write(dir.join("t.csv"), header_row).unwrap();
    let options = ImportOptions { concurrent_sessions: Some(2), total_sessions: Some(7), ..ImportOptions::default() };
    let e = import_trace(&dir.join("t.yaml"), &options).unwrap_err().to_string();
    assert!(e.ends_with("t.csv: total_sessions: 7 sessions asked of a trace with no records"), "{e}");
}

/// What the 1M run found in `blis-trainval` (seed 1): stages of 2^32 s
/// loaded into arrivals the workload reader refuses (beyond the clock); the
/// loader now refuses the stages.
#[test]
fn trainval_stages_past_the_clock_are_refused() {
    use blis_sweep::workload::import::blis_trainval;
    let dir = Dir::new("fuzz-trainval-clock");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz");
    copy_dir(&data.join("blis-trainval"), &dir.path);
    let configs = dir.join("trainval15_experiment_configs.json");
    std::fs::copy(data.join("known/trainval-stages-past-the-clock.json"), &configs).unwrap();
    let names = blis_trainval::list(&dir.path).unwrap();
    let errors: Vec<String> =
        names.iter().filter_map(|n| blis_trainval::load(&dir.path, n).err()).map(|e| e.to_string()).collect();
    assert!(
        errors.iter().any(|e| e.starts_with(&configs.display().to_string())
            && e.contains("stages: in all 4294967306 s is beyond the simulator's clock")),
        "{errors:?}"
    );
}

/// What the report-folder target found when it mutated `capacity.parquet`
/// (`tests/data/fuzz/known/corrupt-capacity.parquet`, seed 7): the parquet
/// crate's decoder panicked ("offset + len out of bounds", arrow-buffer's
/// `BitChunks::new`, from `ParquetRecordBatchReader::next`). The report now
/// refuses the file in one line, and `blis-sweep report` prints no panic.
#[test]
fn a_corrupt_capacity_table_is_refused() {
    let dir = Dir::new("fuzz-corrupt-capacity");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz");
    copy_dir(&data.join("report-folder"), &dir.path);
    std::fs::copy(data.join("known/corrupt-capacity.parquet"), dir.join("capacity.parquet")).unwrap();
    let e = blis_sweep::report::write(&dir.path).unwrap_err().to_string();
    one_line(&e, &dir.join("capacity.parquet").display().to_string());
    let out = crate::util::TestCommand::new(&dir.path, &["report", "."]).output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.starts_with("blis-sweep: ./capacity.parquet: not a readable Parquet table"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// 325 random workloads (the trace-pair target's seeds 0..325, unmutated)
/// exported as TraceV2 and replayed closed loop: every pair measures the
/// same TTFT, ITL and E2E means and hit rate as its run.
#[test]
fn trace_pairs_round_trip_equal() {
    let dir = Dir::new("trace-pairs");
    let mut accepted = 0;
    for seed in 0..325u32 {
        std::fs::write(dir.join("seed.txt"), seed.to_string()).unwrap();
        accepted += u32::from(trace_pair(&dir.path));
    }
    assert_eq!(accepted, 325, "every random workload runs within the clock");
}

#[test]
fn fuzz_every_parser_briefly() {
    let (text, clean) = fuzz_all(3_000, 1);
    assert!(clean, "panics:\n{text}");
}

/// `BLIS_FUZZ_INPUTS` inputs (default 1,000,000) over all targets, seed
/// `BLIS_FUZZ_SEED`; prints the table. Run by `scripts/fuzz.sh`.
#[test]
#[ignore]
fn fuzz_every_parser_long() {
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let started = Instant::now();
    let (text, clean) = fuzz_all(env("BLIS_FUZZ_INPUTS", 1_000_000), env("BLIS_FUZZ_SEED", 1));
    println!(
        "{text}search: {} searches started, {} answered, {} probes\ntotal {:.0} s",
        SEARCHES[0].load(Ordering::Relaxed),
        SEARCHES[1].load(Ordering::Relaxed),
        SEARCHES[2].load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
    assert!(clean, "panics:\n{text}");
}
