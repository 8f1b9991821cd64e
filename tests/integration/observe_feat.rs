//! What real clients send, shared by `run` and `observe`: a generator spec
//! as the workload (`--workload-spec`, `--preset`/`--rate`/`--num-requests`),
//! session pools, SLO class and tenant headers, the chat API.

use crate::util::{Dir, LINEAR_SCENARIO, TestCommand};

/// A spec with shared prefixes and multi-turn sessions: the streams a
/// generator has beyond single calls.
const SPEC: &str = "\
num_requests: 12
rate: 4
input: {kind: lognormal, median: 40, sigma: 0.5, min: 4, max: 200}
output: {kind: uniform, min: 2, max: 8}
prefix: {groups: 2, tokens: 16}
sessions: {turns: {kind: constant, value: 2}, think_time: {kind: constant, value: 0.2}}
";

/// `run --workload-spec S --seed K` is `generate --spec S --seed K -o w`
/// then `run w`: the same results and metrics, byte for byte.
#[test]
fn run_with_a_workload_spec_is_run_of_what_generate_writes() {
    let dir = Dir::new("feat-spec");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("spec.yaml", SPEC);
    let run = |extra: &[&str], out: &str| {
        let metrics = format!("{out}.metrics");
        let args = [&["run", "-q", "-s", "s.yaml", "-o", out, "--metrics", &metrics][..], extra];
        TestCommand::new(&dir.path, &args.concat()).stdout();
    };
    TestCommand::new(&dir.path, &["generate", "--spec", "spec.yaml", "--seed", "3", "-o", "w.jsonl"]).stdout();
    run(&["w.jsonl"], "file.jsonl");
    run(&["--workload-spec", "spec.yaml", "--seed", "3"], "spec.jsonl");
    assert_eq!(dir.read("file.jsonl"), dir.read("spec.jsonl"));
    let metrics = dir.read("file.jsonl.metrics");
    assert!(metrics.contains("\"completed_requests\": 12"), "{metrics}");
    assert_eq!(metrics, dir.read("spec.jsonl.metrics"));
    // Another seed, other requests.
    run(&["--workload-spec", "spec.yaml", "--seed", "4"], "other.jsonl");
    assert_ne!(dir.read("file.jsonl"), dir.read("other.jsonl"));

    // The flags alone, and over the spec's keys, as `generate` takes them.
    let flags = ["--preset", "summarization", "--rate", "8", "--num-requests", "5"];
    TestCommand::new(&dir.path, &[&["generate", "-o", "w2.jsonl"][..], &flags].concat()).stdout();
    run(&["w2.jsonl"], "file2.jsonl");
    run(&flags, "flags2.jsonl");
    assert_eq!(dir.read("file2.jsonl"), dir.read("flags2.jsonl"));
    let over = ["--workload-spec", "spec.yaml", "--num-requests", "3", "--rate", "1"];
    TestCommand::new(
        &dir.path,
        &["generate", "--spec", "spec.yaml", "--num-requests", "3", "--rate", "1", "-o", "w3.jsonl"],
    )
    .stdout();
    run(&["w3.jsonl"], "file3.jsonl");
    run(&over, "over3.jsonl");
    assert_eq!(dir.read("file3.jsonl"), dir.read("over3.jsonl"));
    assert_eq!(dir.read("file3.jsonl").lines().count(), 3);
}

/// A bad spec names its file and the key's line, a bad flag the flag; a
/// generator and another source are refused together; nothing is written.
#[test]
fn a_bad_workload_spec_is_one_line_naming_where() {
    let dir = Dir::new("feat-spec-bad");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("bad.yaml", "num_requests: 3\nrate: 1\npreset: nosuch\n");
    dir.create("w.jsonl", "");
    let fails = |args: &[&str]| {
        TestCommand::new(&dir.path, &[&["run", "-s", "s.yaml", "-o", "r.jsonl"][..], args].concat()).fails()
    };
    let err = fails(&["--workload-spec", "bad.yaml"]);
    assert!(err.starts_with("blis-sweep: bad.yaml:3: preset: unknown preset `nosuch`"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let err = fails(&["--rate", "-1", "--num-requests", "2"]);
    assert!(err.starts_with("blis-sweep: --rate: -1 must be a positive"), "{err}");
    let err = fails(&["--preset", "chatbot"]);
    assert!(err.contains("--rate and --num-requests"), "{err}");
    let err = fails(&["w.jsonl", "--workload-spec", "bad.yaml"]);
    assert!(err.contains("cannot be used with"), "{err}");
    let err = fails(&["--workload-spec", "missing.yaml"]);
    assert!(err.starts_with("blis-sweep: missing.yaml: cannot read"), "{err}");
    let err = fails(&["--workload-spec", "bad.yaml", "--metrics", "bad.yaml"]);
    assert!(err.contains("--metrics") && err.contains("--workload-spec"), "{err}");
    assert_eq!(dir.files(), ["bad.yaml", "s.yaml", "w.jsonl"]);
}
