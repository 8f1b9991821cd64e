//! Issue 22's input and output defects (folders 03, 10, 11 and 20 of the
//! adversarial run), one `defect_NN_*` test each or more, and item 7's
//! messages: every importer reads a pipe or FIFO through one spool, colliding
//! outputs are refused before anything runs, a command's outputs are
//! committed all together or not at all, a closed stdout ends quietly, and
//! a plan's semantic errors name the plan's file, line and field.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::util::{Dir, TestCommand, rows};

const BIN: &str = env!("CARGO_BIN_EXE_blis-sweep");

/// The files of `tests/data/defects/NAME` copied into `dir`.
fn copy_case(dir: &Dir, name: &str) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/defects").join(name);
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(&e.file_name().to_string_lossy())).unwrap();
    }
}

fn import_file(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/import").join(name)).unwrap()
}

/// Runs the binary in `dir` with `input` on its stdin (a pipe).
fn with_stdin(dir: &Path, args: &[&str], input: &str) -> Output {
    let mut child = Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_owned();
    // (The tool may stop reading early on an error: a broken pipe here is fine.)
    let writer = std::thread::spawn(move || drop(stdin.write_all(input.as_bytes())));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

/// Waits for `child` at most `limit`; kills it and fails if it is still running.
fn wait_within(mut child: Child, limit: Duration, what: &str) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?} (hung)");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// 03: a trace on a pipe gives what the same file gives, for every importer
/// (mooncake once simulated 0 requests with exit 0; azure said "missing
/// column"), as does `import` from a pipe.
#[test]
fn defect_03_every_importer_reads_a_pipe_as_the_file() {
    let dir = Dir::new("d03-pipe");
    copy_case(&dir, "03-pipe-import");
    dir.create("agent_calls.csv", &import_file("agent_calls.csv"));
    let formats = [("mooncake", "mooncake.jsonl"), ("azure", "azure.csv"), ("agent-calls", "agent_calls.csv")];
    for (format, file) in formats {
        let run = |input: &str, out: &str| {
            let mut args = vec!["run", "-q", "-s", "S.yaml", "--session-rate", "1"];
            if format != "agent-calls" {
                args.truncate(4);
            }
            let tail = ["--input", input, "-o", out, "--metrics", "m.json"];
            args.into_iter().chain(tail).map(str::to_owned).collect::<Vec<_>>()
        };
        let from_file = run(&format!("{format}:{file}"), "f.jsonl");
        TestCommand::new(&dir.path, &from_file.iter().map(String::as_str).collect::<Vec<_>>()).stdout();
        let from_pipe = run(&format!("{format}:/dev/stdin"), "p.jsonl");
        let from_pipe: Vec<&str> = from_pipe.iter().map(String::as_str).collect();
        let out = with_stdin(&dir.path, &from_pipe, &dir.read(file));
        assert!(out.status.success(), "{format}: {}", stderr(&out));
        let n = rows(&dir.read("f.jsonl")).len();
        assert!(n > 0, "{format}");
        assert_eq!(dir.read("p.jsonl"), dir.read("f.jsonl"), "{format}");
        let m: serde_json::Value = serde_json::from_str(&dir.read("m.json")).unwrap();
        assert_eq!(m["injected_requests"].as_u64(), Some(n as u64), "{format}");
    }
    assert_eq!(rows(&dir.read("f.jsonl")).len(), 2, "agent-calls: one request DAG per session");
    // TraceV2: its data on a pipe (the header beside it names the columns).
    dir.create("trace.yaml", &import_file("trace.yaml"));
    dir.create("trace.csv", &import_file("trace.csv"));
    let args = |data: &'static str, out: &'static str| {
        let header = ["run", "-q", "-s", "S.yaml", "--session-mode", "closed-loop", "--trace-header", "trace.yaml"];
        let mut args = header.to_vec();
        args.extend(["--trace-data", data, "-o", out]);
        args
    };
    TestCommand::new(&dir.path, &args("trace.csv", "f.jsonl")).stdout();
    let out = with_stdin(&dir.path, &args("/dev/stdin", "p.jsonl"), &dir.read("trace.csv"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(dir.read("p.jsonl"), dir.read("f.jsonl"));
    // `import` reads its trace twice (the rows, then the block reuse).
    let out =
        with_stdin(&dir.path, &["import", "mooncake", "/dev/stdin", "-o", "w.jsonl"], &dir.read("mooncake.jsonl"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("4 requests") && stderr(&out).contains("block reuse: 37.5 %"), "{}", stderr(&out));
    assert_eq!(rows(&dir.read("w.jsonl")).len(), 4);
}

/// 03: a plan whose `import:` is a FIFO runs (it once blocked for ever: the
/// FIFO was hashed, then opened again with no writer).
#[test]
fn defect_03_a_plan_importing_a_fifo_runs() {
    let dir = Dir::new("d03-fifo");
    copy_case(&dir, "03-pipe-import");
    dir.create(
        "pf.yaml",
        "name: pf\nworkload: {import: mooncake, path: ff}\nscenarios: [S.yaml]\ngrid: {seed: [1, 2]}\noutput: out\n",
    );
    mkfifo(&dir.join("ff"));
    let trace = dir.read("mooncake.jsonl");
    let fifo = dir.join("ff");
    let writer = std::thread::spawn(move || std::fs::write(fifo, trace).unwrap());
    let child = Command::new(BIN)
        .current_dir(&dir.path)
        .args(["-q", "--no-report", "pf.yaml"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_within(child, Duration::from_secs(60), "a sweep importing a FIFO");
    writer.join().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let manifest: serde_json::Value = serde_json::from_str(&dir.read("out/manifest.json")).unwrap();
    let runs = manifest["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r["status"] == "ok"), "{manifest}");
    for r in runs {
        let m: serde_json::Value =
            serde_json::from_str(&dir.read(&format!("out/runs/{}/metrics.json", r["run_id"].as_str().unwrap())))
                .unwrap();
        assert_eq!(m["injected_requests"], 4, "every run reads the whole trace");
    }
    // A workload JSONL on a FIFO, for a plan's `path:`.
    TestCommand::new(&dir.path, &["import", "mooncake", "mooncake.jsonl", "-o", "w.jsonl"]).stdout();
    mkfifo(&dir.join("wf"));
    let workload = dir.read("w.jsonl");
    let fifo = dir.join("wf");
    let writer = std::thread::spawn(move || std::fs::write(fifo, workload).unwrap());
    dir.create("pw.yaml", "name: pw\nworkload: {path: wf}\nscenarios: [S.yaml]\ngrid: {seed: [1, 2]}\noutput: outw\n");
    let child = Command::new(BIN)
        .current_dir(&dir.path)
        .args(["-q", "--no-report", "pw.yaml"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_within(child, Duration::from_secs(60), "a sweep reading a FIFO workload");
    writer.join().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!dir.files().iter().any(|f| f.contains("tmp") || f.contains("spool")), "{:?}", dir.files());
}

/// 10: two outputs that are one file, or an output that is an input, are
/// refused before anything is simulated, naming both flags; nothing is
/// written and the input is untouched.
#[test]
fn defect_10_colliding_outputs_are_refused_up_front() {
    let dir = Dir::new("d10-collide");
    copy_case(&dir, "10-output-collisions");
    let fails = |args: &[&str]| {
        let err = TestCommand::new(&dir.path, args).fails();
        assert_eq!(err.lines().count(), 1, "{err}");
        err
    };
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "-q", "-s", "S.yaml", "w3.jsonl"];
        args.extend_from_slice(extra);
        args.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let refused = |extra: &[&str], expect: &str| {
        let args = run(extra);
        let err = fails(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(err.contains(expect), "{extra:?}: {err}");
    };
    std::fs::create_dir(dir.join("sub")).unwrap();
    refused(
        &["-o", "same.json", "--metrics", "same.json"],
        "blis-sweep: --metrics: same.json is the same file as -o (same.json)",
    );
    refused(&["-o", "tr.csv", "--trace-output", "tr"], "--trace-output: tr.csv is the same file as -o (tr.csv)");
    refused(
        &["-o", "r.jsonl", "--step-trace", "./sub/../r.jsonl"],
        "--step-trace: ./sub/../r.jsonl is the same file as -o",
    );
    refused(
        &["-o", "r.jsonl", "--metrics", "m.json", "--step-trace", "m.json"],
        "--step-trace: m.json is the same file as --metrics",
    );
    refused(
        &["-o", "w3.jsonl", "--metrics", "/dev/null"],
        "-o: w3.jsonl is the same file as the input WORKLOAD (w3.jsonl)",
    );
    refused(&["-o", "r.jsonl", "--metrics", "S.yaml"], "--metrics: S.yaml is the same file as the input -s (S.yaml)");
    // Two outputs on one stdout.
    refused(&["-o", "/dev/stdout"], "--metrics: stdout (not given) is the same file as -o (/dev/stdout)");
    // The same file through a link that does not point anywhere yet, and through one that does.
    std::os::unix::fs::symlink("r.jsonl", dir.join("link")).unwrap();
    refused(&["-o", "r.jsonl", "--metrics", "link"], "--metrics: link is the same file as -o (r.jsonl)");
    std::os::unix::fs::symlink("w3.jsonl", dir.join("in-link")).unwrap();
    refused(&["-o", "in-link", "--metrics", "m.json"], "-o: in-link is the same file as the input WORKLOAD");
    assert_eq!(dir.files(), ["S.yaml", "in-link", "link", "sub", "w3.jsonl"], "nothing written");
    assert_eq!(
        dir.read("w3.jsonl"),
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/defects/10-output-collisions/w3.jsonl")
        )
        .unwrap()
    );
    // /dev/null takes any number of outputs.
    let args = run(&["-o", "/dev/null", "--metrics", "/dev/null", "--step-trace", "/dev/null"]);
    TestCommand::new(&dir.path, &args.iter().map(String::as_str).collect::<Vec<_>>()).stdout();
    // The other commands that write files.
    let err = fails(&["import", "mooncake", "w3.jsonl", "-o", "w3.jsonl"]);
    assert!(err.contains("-o: w3.jsonl is the same file as the input PATH (w3.jsonl)"), "{err}");
    dir.create("spec.yaml", "preset: chatbot\nnum_requests: 3\nrate: 1\n");
    let err = fails(&["generate", "--spec", "spec.yaml", "-o", "spec.yaml"]);
    assert!(err.contains("-o: spec.yaml is the same file as the input --spec (spec.yaml)"), "{err}");
    let err = fails(&["calibrate", "--real", "w3.jsonl", "--sim", "w3.jsonl", "--report", "w3.jsonl"]);
    assert!(err.contains("--report: w3.jsonl is the same file as the input --real"), "{err}");
    dir.create("c.yaml", "step_overhead_us: 1\n");
    let err = fails(&["fit", "--runs", "nowhere", "--experiment", "x", "--start", "c.yaml", "--out", "c.yaml"]);
    assert!(err.contains("--out: c.yaml is the same file as the input --start (c.yaml)"), "{err}");
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/blis-mini");
    let err = fails(&[
        "convert",
        "blis-vllm-h100",
        "--data",
        data,
        "--experiment",
        "mini",
        "--experiment",
        "mini",
        "--out",
        "o",
    ]);
    assert!(err.contains("--out: o/mini.workload.jsonl is the same file as --out (o/mini.workload.jsonl)"), "{err}");
    assert!(!dir.join("o/mini.workload.jsonl").exists());
    assert_eq!(dir.read("spec.yaml"), "preset: chatbot\nnum_requests: 3\nrate: 1\n");
}

/// 11, without root: the metrics cannot be written at commit time (a full
/// device, `/dev/full`, fails when the buffer is flushed); the results,
/// complete by then, were committed anyway. Now neither is.
#[test]
fn defect_11_a_failed_output_commits_no_other() {
    let dir = Dir::new("d11-full");
    copy_case(&dir, "11-partial-commit");
    if !Path::new("/dev/full").exists() {
        eprintln!("defect_11_a_failed_output_commits_no_other: skipped: no /dev/full on this machine");
        return;
    }
    dir.create("r.jsonl", "old results\n");
    for extra in [&["--metrics", "/dev/full"][..], &["--metrics", "m.json", "--step-trace", "/dev/full"]] {
        let mut args = vec!["run", "-q", "-s", "S.yaml", "w3.jsonl", "-o", "r.jsonl", "--trace-output", "tr"];
        args.extend_from_slice(extra);
        let err = TestCommand::new(&dir.path, &args).fails();
        assert!(err.contains("/dev/full") && err.contains("No space left on device"), "{err}");
        assert_eq!(dir.files(), ["S.yaml", "r.jsonl", "w3.jsonl"], "{extra:?}: nothing committed, no temporary file");
        assert_eq!(dir.read("r.jsonl"), "old results\n");
    }
}

/// Unmounts the tmpfs of the root-only test, whatever happens.
struct Mounted<'a>(&'a Path);

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

/// 11, the reproducer itself (root only: a 256 KiB tmpfs that holds the
/// results but not the metrics). Skips, saying so, where it cannot mount.
#[test]
fn defect_11_a_full_disk_commits_nothing() {
    let dir = Dir::new("d11-tmpfs");
    copy_case(&dir, "11-partial-commit");
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if !root {
        eprintln!("defect_11_a_full_disk_commits_nothing: skipped: needs root to mount a tmpfs");
        return;
    }
    let mut w40 = String::new();
    for i in 0..40 {
        w40.push_str(&format!(
            "{{\"request_id\": {i}, \"arrival_time\": {}, \"initial\": [0], \"sub_requests\": [{{\"kind\": \"llm\", \"input_tokens\": 50, \"output_tokens\": 120, \"next\": []}}]}}\n",
            i as f64 * 0.01
        ));
    }
    dir.create("w40.jsonl", &w40);
    let results = TestCommand::new(&dir.path, &["run", "-q", "-s", "S.yaml", "w40.jsonl"]).stdout();
    let mnt = dir.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount").args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"]).arg(&mnt).output();
    if !mounted.as_ref().is_ok_and(|o| o.status.success()) {
        eprintln!("defect_11_a_full_disk_commits_nothing: skipped: cannot mount a tmpfs ({mounted:?})");
        return;
    }
    let _guard = Mounted(&mnt);
    // Leave room for the results and not much more (64 pages of 4 KiB in all).
    let pages = results.len().div_ceil(4096);
    std::fs::write(mnt.join("fill"), vec![0u8; (64 - pages) * 4096]).unwrap();
    let err = TestCommand::new(
        &dir.path,
        &["run", "-q", "-s", "S.yaml", "w40.jsonl", "-o", "mnt/res.jsonl", "--metrics", "mnt/m.json"],
    )
    .fails();
    assert!(err.contains("No space left on device"), "{err}");
    let left: Vec<String> =
        std::fs::read_dir(&mnt).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(left, ["fill"], "neither output committed, no temporary file left");
}

/// Runs `args` with stdout closed by the reader after `lines` lines (0: before
/// anything is read); returns (exit code, stderr).
fn closed_stdout(dir: &Path, args: &[&str], lines: usize) -> (Option<i32>, String) {
    let mut child =
        Command::new(BIN).current_dir(dir).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut reader = BufReader::new(stdout);
    for _ in 0..lines {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
    }
    drop(reader);
    let out = wait_within(child, Duration::from_secs(120), &format!("{args:?} with stdout closed"));
    (out.status.code(), stderr(&out))
}

/// 20: `plan BIG.yaml | head -3` panicked (EPIPE, exit 101). Every command
/// that prints to stdout now ends quietly, with exit 0, when stdout closes.
#[test]
fn defect_20_a_closed_stdout_ends_quietly() {
    let dir = Dir::new("d20-pipe");
    copy_case(&dir, "20-plan-pipe-panic");
    copy_case(&dir, "10-output-collisions");
    copy_case(&dir, "03-pipe-import");
    let (code, err) = closed_stdout(&dir.path, &["plan", "big.yaml"], 3);
    assert_eq!((code, err.as_str()), (Some(0), ""));
    let mut big = String::new();
    for i in 0..3000 {
        big.push_str(&format!(
            "{{\"request_id\": {i}, \"arrival_time\": {}, \"initial\": [0], \"sub_requests\": [{{\"kind\": \"llm\", \"input_tokens\": 20, \"output_tokens\": 20, \"next\": []}}]}}\n",
            i as f64 * 0.01
        ));
    }
    dir.create("big.jsonl", &big);
    TestCommand::new(&dir.path, &["run", "-q", "-s", "S.yaml", "big.jsonl", "-o", "r.jsonl"]).stdout();
    dir.create(
        "cap.yaml",
        "name: cap\nworkload:\n  generate: {preset: chatbot, rate: 10, num_requests: 30}\nscenarios:\n  - {name: a, model: Llama-3.1-8B, hardware: H100, latency_model: {kind: linear, beta: [5000, 2, 20]}}\n\
         grid:\n  seed: [1]\nsearch:\n  slo: {ttft_p99_ms: 1000, itl_p99_ms: 50}\n  over: rate\n  range: [1, 8]\n  precision: 0.2\noutput: out\n",
    );
    let commands: [&[&str]; 7] = [
        &["plan", "big.yaml"],
        &["run", "-q", "-s", "S.yaml", "big.jsonl"],
        &["run", "-q", "-s", "S.yaml", "w3.jsonl", "-o", "/dev/null"],
        &["results", "r.jsonl"],
        &["generate", "--rate", "10", "--num-requests", "3000"],
        &["import", "mooncake", "mooncake.jsonl", "-o", "/dev/stdout"],
        &["capacity", "-q", "--no-report", "cap.yaml"],
    ];
    for args in commands {
        let (code, err) = closed_stdout(&dir.path, args, 0);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{args:?}: {err}");
    }
}

/// Item 7: a plan's semantic errors name the plan, the line and the key path
/// (an override's own key, a repeated axis value, a search that does not add
/// up, a missing or repeated key), and a run an override cannot resolve
/// names the override where the plan sets it.
#[test]
fn plan_semantic_errors_name_plan_line_and_field() {
    let dir = Dir::new("d-plan-msgs");
    copy_case(&dir, "10-output-collisions");
    let head = "name: t\noutput: out\nworkload: {path: w3.jsonl}\nscenarios: [S.yaml]\n";
    let cases = [
        (
            "grid:\n  overrides:\n    engine.no_such_key: [1]\n",
            "p.yaml:7: grid.overrides.engine.no_such_key: 1: unknown field `no_such_key`",
        ),
        (
            "grid:\n  overrides:\n    tp: [1]\n    engine.max_num_seqs: [8, abc]\n",
            "p.yaml:8: grid.overrides.engine.max_num_seqs: \"abc\": invalid type",
        ),
        (
            "grid:\n  overrides:\n    engine.max_num_seqs: [8, 16, 8]\n",
            "p.yaml:7: grid.overrides.engine.max_num_seqs: 8 is given twice",
        ),
        ("grid:\n  seed: [1, 2, 1]\n", "p.yaml:6: grid.seed: 1 is given twice"),
        ("grid:\n  rate_scale: [1, 1.0]\n", "p.yaml:6: grid.rate_scale: 1 is given twice"),
        ("grid:\n  seed: []\n", "p.yaml:6: grid.seed: give at least one value"),
        (
            "search:\n  slo: {ttft_p99_ms: 100}\n  range: [10, 1]\n",
            "p.yaml:7: search.range: [10, 1]: give 0 < low < high",
        ),
        (
            "grid:\n  concurrency: [4]\nsearch:\n  slo: {ttft_p99_ms: 100}\n  range: [1, 10]\n",
            "p.yaml:6: grid.concurrency: a capacity search sets the load",
        ),
        ("search:\n  range: [1, 10]\n", "p.yaml:6: search.slo: missing"),
        ("grid: {seed: [1]}\ngrid: {seed: [2]}\n", "p.yaml:6: grid: given twice"),
    ];
    for (tail, expect) in cases {
        dir.create("p.yaml", &format!("{head}{tail}"));
        let err = TestCommand::new(&dir.path, &["plan", "p.yaml"]).fails();
        assert!(err.starts_with(&format!("blis-sweep: {expect}")), "{tail}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    dir.create("p.yaml", "name: t\nworkload: {path: w3.jsonl}\nscenarios: [S.yaml]\n");
    let err = TestCommand::new(&dir.path, &["plan", "p.yaml"]).fails();
    assert!(err.starts_with("blis-sweep: p.yaml:3: output: missing"), "{err}");
    dir.create("p.yaml", &format!("{head}scenarios: [S.yaml, ./S.yaml]\n").replace("scenarios: [S.yaml]\n", ""));
    let err = TestCommand::new(&dir.path, &["plan", "p.yaml"]).fails();
    assert!(
        err.starts_with("blis-sweep: p.yaml:4: scenarios: two scenarios make runs with the same parameters"),
        "{err}"
    );
    // A value only resolving the scenario finds wrong: that run fails, named.
    dir.create("p.yaml", &format!("{head}grid:\n  overrides:\n    engine.max_num_seqs: [8, 0]\n"));
    let out = TestCommand::new(&dir.path, &["-q", "--no-report", "p.yaml"]).output();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains(": p.yaml:7: grid.overrides.engine.max_num_seqs: must be positive (scenario "), "{err}");
}

/// A negative number after a numeric flag is that flag's value, refused by
/// its own check in one line naming it (was clap's "unexpected argument").
#[test]
fn a_negative_flag_value_is_named_by_its_flag() {
    let dir = crate::util::Dir::new("negative-flag");
    dir.create("S.yaml", crate::util::LINEAR_SCENARIO);
    dir.create("w.jsonl", "{\"request_id\":0,\"arrival_time\":0,\"initial\":[0],\"sub_requests\":[{\"kind\":\"llm\",\"input_tokens\":10,\"output_tokens\":2,\"next\":[]}]}\n");
    for (flag, value) in [("--horizon", "-1"), ("--timeout", "-5"), ("--rate-scale", "-2")] {
        let err = crate::util::TestCommand::new(
            &dir.path,
            &["run", "-s", "S.yaml", "w.jsonl", flag, value, "-o", "/dev/null"],
        )
        .fails();
        assert!(err.starts_with(&format!("blis-sweep: {flag}: {value} ")), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// Stderr on a full disk (`2>/dev/full`): the summary and the error lines
/// are dropped, never a panic; the exit status is the command's own.
#[test]
fn a_full_stderr_is_not_a_panic() {
    let dir = crate::util::Dir::new("full-stderr");
    dir.create("S.yaml", crate::util::LINEAR_SCENARIO);
    dir.create("w.jsonl", "{\"request_id\":0,\"arrival_time\":0,\"initial\":[0],\"sub_requests\":[{\"kind\":\"llm\",\"input_tokens\":10,\"output_tokens\":2,\"next\":[]}]}\n");
    let (code, _) =
        crate::util::sh(&dir.path, "\"$BIN\" run -s S.yaml w.jsonl -o r.jsonl --metrics m.json 2>/dev/full");
    assert_eq!(code, Some(0));
    assert!(dir.join("r.jsonl").exists() && dir.join("m.json").exists());
    let (code, _) = crate::util::sh(&dir.path, "\"$BIN\" run -s missing.yaml w.jsonl -o x.jsonl 2>/dev/full");
    assert_eq!(code, Some(2));
}
