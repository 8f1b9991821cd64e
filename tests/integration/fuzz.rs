//! Fuzzing every parser and importer: the workload and result readers, the
//! scenario, model-config, plan and generator-spec loaders, the TraceV2
//! reader and both `convert` importers. Each target is a folder of valid
//! files in `tests/data/fuzz/`; every input is one of them mutated (bytes
//! flipped, inserted, deleted, duplicated, spliced, numbers swapped for
//! extreme ones, structural tokens inserted) and run through the library in a
//! scratch copy of the folder. Whatever the input, the library must return
//! (an error is fine), never panic; what it accepts must survive a round
//! trip (a converted or generated workload is read back by the reader, a
//! simulated result by the result reader, and accepted workloads are
//! simulated).
//!
//! `fuzz_every_parser_briefly` runs in CI; `scripts/fuzz.sh N` runs
//! `fuzz_every_parser_long` with N inputs over all targets in release, and
//! prints per-target counts and the slowest input.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use blis_sweep::calibrate::observed;
use blis_sweep::scenario::{self, ModelArch, ScenarioSpec};
use blis_sweep::sim::{self, FinishedRequest, RunConfig, Sink};
use blis_sweep::sweep::{calibration, grid};
use blis_sweep::workload::generate::{GenerateSpec, Generator};
use blis_sweep::workload::import::convert;
use blis_sweep::workload::reader::{Format, Reader};
use blis_sweep::workload::writer::write_workload_row;
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

/// Simulates accepted rows on a small engine (open loop, then a client
/// timeout) and reads the results back.
fn simulate(rows_in: Vec<blis_sweep::workload::Request>) {
    static DEPLOYMENT: std::sync::OnceLock<scenario::Deployment> = std::sync::OnceLock::new();
    let d = DEPLOYMENT.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz/scenario/linear.yaml");
        scenario::load(&path).unwrap()
    });
    struct Rows(Vec<u8>);
    impl Sink for Rows {
        fn request_done(&mut self, r: &FinishedRequest) -> std::io::Result<()> {
            blis_sweep::output::result_row(&mut self.0, r);
            Ok(())
        }
    }
    for timeout_us in [None, Some(50_000)] {
        let config = RunConfig { timeout_us, step_trace: true, ..d.run_config() };
        let mut rows = Rows(Vec::new());
        let source = rows_in.iter().cloned().map(Ok::<_, ()>);
        sim::run(config, source, &mut rows).unwrap();
        for row in Reader::new(&rows.0[..], "results", Format::Results) {
            if let Err(e) = row {
                panic!("a simulated result is rejected by the result reader: {e}");
            }
        }
    }
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
        let result = if calibration::is_calibration_plan(&text) {
            calibration::load(&path).map(|_| ())
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

fn tracev2(dir: &Path) -> bool {
    let result = observed::from_trace(&dir.join("t.yaml"), &dir.join("t.csv"));
    if let Err(e) = &result {
        one_line(&e.to_string(), &dir.display().to_string());
    }
    result.is_ok()
}

fn converted(c: &convert::Converted, what: &str) {
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
    let c = convert::blis_vllm_h100(dir, "mini");
    match &c {
        Ok(c) => converted(c, "convert blis-vllm-h100"),
        Err(e) => one_line(&e.to_string(), &dir.display().to_string()),
    }
    c.is_ok()
}

fn convert_llmservingsim(dir: &Path) -> bool {
    let c = convert::llmservingsim(dir, "GPU__m");
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
    list: fn(&Path) -> Result<Vec<String>, convert::ConvertError>,
    load: fn(&Path, &str) -> Result<T, convert::ConvertError>,
    check: fn(&T),
) -> bool {
    let refused = |e: convert::ConvertError| one_line(&e.to_string(), &dir.display().to_string());
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
    list_and_load(dir, silicon::list, silicon::load, |_| {})
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
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ blis_sweep::sweep::grid::hash64(target.name.as_bytes()));
    let mut outcome =
        Outcome { inputs: 0, accepted: 0, slowest: Duration::ZERO, slowest_input: Vec::new(), failures: Vec::new() };
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
            "{:<22} {:>9} inputs  {:>4.1} % accepted  {:>3} panics  slowest {:>8.2} ms ({:?}…)\n",
            t.name,
            o.inputs,
            100.0 * o.accepted as f64 / o.inputs.max(1) as f64,
            o.failures.len(),
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
    let per = total.div_ceil(TARGETS.len() as u64);
    let outcomes: Vec<(&Target, Outcome)> = TARGETS.iter().map(|t| (t, fuzz(t, per, seed))).collect();
    let clean = outcomes.iter().all(|(_, o)| o.failures.is_empty());
    (report(&outcomes), clean)
}

#[test]
fn fuzz_every_parser_briefly() {
    let (text, clean) = fuzz_all(2_700, 1);
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
    println!("{text}total {:.0} s", started.elapsed().as_secs_f64());
    assert!(clean, "panics:\n{text}");
}
