//! Every workload rejection rule: exit code 2, one line on stderr
//! `blis-sweep: FILE:LINE: field: reason`, and no output at all (no result
//! file, no metrics file, no temporary file left behind, nothing on stdout).
//!
//! Each bad row sits on line 2 or 3 after valid rows, so the line number in
//! the message is not trivially 1.

use crate::util::{Dir, LINEAR_SCENARIO, TestCommand};

/// A valid row: id 0 at 1 s, one llm node.
const GOOD0: &str = r#"{"request_id":0,"arrival_time":1.0,"initial":[0],"sub_requests":[{"kind":"llm","next":[],"input_tokens":10,"output_tokens":2}]}"#;
/// A valid row: id 1 at 2 s, llm → tool_call → llm.
const GOOD1: &str = r#"{"request_id":1,"arrival_time":2.0,"initial":[0],"sub_requests":[{"kind":"llm","next":[1],"input_tokens":10,"output_tokens":2},{"kind":"tool_call","next":[2],"input_tokens":0,"output_tokens":0,"duration":0.1},{"kind":"llm","next":[],"input_tokens":5,"output_tokens":3,"interval":0.01}]}"#;

/// A valid llm node with `extra` fields appended (`extra` starts with `,` or is empty).
fn llm(next: &str, extra: &str) -> String {
    format!(r#"{{"kind":"llm","next":{next},"input_tokens":10,"output_tokens":2{extra}}}"#)
}

/// A valid tool_call node with `extra` fields appended.
fn tool(next: &str, extra: &str) -> String {
    format!(r#"{{"kind":"tool_call","next":{next},"input_tokens":0,"output_tokens":0{extra}}}"#)
}

/// A row with id 2 at 3 s (sorts after GOOD0 and GOOD1), given its `initial`
/// and its sub-request objects.
fn row(initial: &str, subs: &[String]) -> String {
    format!(r#"{{"request_id":2,"arrival_time":3.0,"initial":{initial},"sub_requests":[{}]}}"#, subs.join(","))
}

/// The bad row on line 2, after GOOD0.
fn on_line2(bad: &str) -> String {
    format!("{GOOD0}\n{bad}\n")
}

/// The bad row on line 3, after GOOD0 and GOOD1.
fn on_line3(bad: &str) -> String {
    format!("{GOOD0}\n{GOOD1}\n{bad}\n")
}

/// Runs `blis-sweep run` on `workload` and asserts the rejection: exit 2, one
/// stderr line starting `blis-sweep: w.jsonl:LINE: FIELD: ` whose reason
/// contains every word in `words`, no files created, and (run again without
/// `-o`/`--metrics`) nothing on stdout.
fn rejects(workload: &str, line: u64, field: &str, words: &[&str]) {
    let dir = Dir::new("reject");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", workload);
    let inputs = vec!["s.yaml".to_owned(), "w.jsonl".to_owned()];

    let stderr = TestCommand::new(
        &dir.path,
        &["run", "--scenario", "s.yaml", "w.jsonl", "-o", "out.jsonl", "--metrics", "m.json"],
    )
    .fails();
    check_message(&stderr, line, field, words, workload);
    assert_eq!(dir.files(), inputs, "a rejected run must write nothing");

    // Results to stdout: the error is found before any result is written.
    let out = TestCommand::new(&dir.path, &["run", "--scenario", "s.yaml", "w.jsonl"]).output();
    assert_eq!(out.status.code(), Some(2), "without -o: expected exit 2");
    assert!(
        out.stdout.is_empty(),
        "without -o: stdout must be empty on error, got:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(String::from_utf8(out.stderr).unwrap(), stderr, "without -o: same message");
    assert_eq!(dir.files(), inputs, "without -o: a rejected run must write nothing");
}

fn check_message(stderr: &str, line: u64, field: &str, words: &[&str], workload: &str) {
    let context = format!("--- workload ---\n{workload}--- stderr ---\n{stderr}");
    assert!(stderr.ends_with('\n') && stderr.lines().count() == 1, "expected exactly one line on stderr\n{context}");
    let prefix = format!("blis-sweep: w.jsonl:{line}: {field}: ");
    assert!(stderr.starts_with(&prefix), "expected prefix `{prefix}`\n{context}");
    let reason = &stderr[prefix.len()..];
    assert!(!reason.trim().is_empty(), "empty reason\n{context}");
    for word in words {
        assert!(reason.contains(word), "reason should mention `{word}`\n{context}");
    }
}

/// One `#[test]` per rule: `name: (workload, line, field, [words in the reason])`.
macro_rules! reject_tests {
    ($($name:ident: ($workload:expr, $line:expr, $field:expr, [$($word:expr),* $(,)?])),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                rejects(&$workload, $line, $field, &[$($word),*]);
            }
        )*
    };
}

reject_tests! {
    // ---- JSON syntax and shape ----
    malformed_json: (
        on_line2(r#"{"request_id":2,"arrival_time":3.0,"initial":[0],"#),
        2, "json", ["EOF", "column"]
    ),
    malformed_json_after_blank_line: (
        format!("{GOOD0}\n\n{{\"request_id\": 2,, }}\n"),
        3, "json", ["column"]
    ),
    trailing_characters_after_row: (
        on_line2(&format!("{} x", row("[0]", &[llm("[]", "")]))),
        2, "json", ["trailing"]
    ),
    unknown_top_level_field: (
        on_line2(&row("[0]", &[llm("[]", "")]).replacen('{', r#"{"priority":1,"#, 1)),
        2, "priority", ["unknown field"]
    ),
    unknown_sub_request_field: (
        on_line3(&row("[0]", &[llm("[1]", ""), llm("[]", r#","prio":1"#)])),
        3, "sub_requests[1].prio", ["unknown field"]
    ),
    missing_input_tokens: (
        on_line2(&row("[0]", &[
            llm("[1]", ""),
            r#"{"kind":"llm","next":[],"output_tokens":2}"#.to_owned(),
        ])),
        2, "sub_requests[1].input_tokens", ["missing field"]
    ),
    missing_arrival_time: (
        on_line2(r#"{"request_id":2,"initial":[0],"sub_requests":[{"kind":"llm","next":[],"input_tokens":10,"output_tokens":2}]}"#),
        2, "arrival_time", ["missing field"]
    ),
    output_tokens_wrong_type: (
        on_line2(&row("[0]", &[
            r#"{"kind":"llm","next":[],"input_tokens":10,"output_tokens":"ten"}"#.to_owned(),
        ])),
        2, "sub_requests[0].output_tokens", ["invalid type"]
    ),
    unknown_kind: (
        on_line2(&row("[0]", &[
            r#"{"kind":"gpu","next":[],"input_tokens":10,"output_tokens":2}"#.to_owned(),
        ])),
        2, "sub_requests[0].kind", ["unknown variant"]
    ),

    // ---- times ----
    negative_arrival_time: (
        on_line2(&row("[0]", &[llm("[]", "")]).replace(r#""arrival_time":3.0"#, r#""arrival_time":-1.0"#)),
        2, "arrival_time", ["non-negative"]
    ),
    infinite_arrival_time: (
        on_line2(&row("[0]", &[llm("[]", "")]).replace(r#""arrival_time":3.0"#, r#""arrival_time":1e999"#)),
        2, "arrival_time", ["finite"]
    ),
    negative_interval: (
        on_line3(&row("[0]", &[llm("[1]", ""), llm("[]", r#","interval":-0.5"#)])),
        3, "sub_requests[1].interval", ["non-negative"]
    ),
    infinite_interval: (
        on_line2(&row("[0]", &[llm("[1]", ""), llm("[]", r#","interval":1e999"#)])),
        2, "sub_requests[1].interval", ["finite"]
    ),
    negative_duration: (
        on_line2(&row("[0]", &[llm("[1]", ""), tool("[]", r#","duration":-2"#)])),
        2, "sub_requests[1].duration", ["non-negative"]
    ),
    infinite_duration: (
        on_line3(&row("[0]", &[llm("[1]", ""), tool("[]", r#","duration":1e999"#)])),
        3, "sub_requests[1].duration", ["finite"]
    ),
    duration_on_llm: (
        on_line2(&row("[0]", &[llm("[]", r#","duration":1.0"#)])),
        2, "sub_requests[0].duration", ["tool_call"]
    ),

    // ---- DAG shape ----
    empty_sub_requests: (
        on_line2(&row("[]", &[])),
        2, "sub_requests", ["at least one"]
    ),
    next_out_of_range: (
        on_line2(&row("[0]", &[llm("[1]", ""), llm("[2]", "")])),
        2, "sub_requests[1].next[0]", ["out of range"]
    ),
    self_loop: (
        on_line3(&row("[0]", &[llm("[1]", ""), llm("[2,1]", ""), llm("[]", "")])),
        3, "sub_requests[1].next[1]", ["itself"]
    ),
    duplicate_next: (
        on_line2(&row("[0]", &[llm("[1,1]", ""), llm("[]", "")])),
        2, "sub_requests[0].next[1]", ["twice"]
    ),
    cycle_without_roots: (
        on_line2(&row("[]", &[llm("[1]", ""), llm("[0]", "")])),
        2, "sub_requests[0].next", ["cycle"]
    ),
    cycle_behind_a_root: (
        on_line3(&row("[2]", &[llm("[1]", ""), llm("[0]", ""), llm("[0]", "")])),
        3, "sub_requests[0].next", ["cycle"]
    ),
    initial_missing_a_root: (
        on_line2(&row("[0]", &[llm("[]", ""), llm("[]", "")])),
        2, "initial", ["roots", "[0, 1]"]
    ),
    initial_not_ascending: (
        on_line3(&row("[1,0]", &[llm("[]", ""), llm("[]", "")])),
        3, "initial", ["roots", "[0, 1]"]
    ),
    initial_names_a_non_root: (
        on_line2(&row("[0,1]", &[llm("[1]", ""), llm("[]", "")])),
        2, "initial", ["roots", "[0]"]
    ),

    // ---- rows relative to each other ----
    duplicate_integer_request_id: (
        on_line3(&row("[0]", &[llm("[]", "")]).replace(r#""request_id":2"#, r#""request_id":0"#)),
        3, "request_id", ["duplicate"]
    ),
    duplicate_string_request_id: (
        format!(
            "{}\n{}\n",
            GOOD0.replace(r#""request_id":0"#, r#""request_id":"a""#),
            row("[0]", &[llm("[]", "")]).replace(r#""request_id":2"#, r#""request_id":"a""#),
        ),
        2, "request_id", ["duplicate"]
    ),
    arrival_time_decreasing: (
        on_line3(&row("[0]", &[llm("[]", "")]).replace(r#""arrival_time":3.0"#, r#""arrival_time":1.5"#)),
        3, "arrival_time", ["sorted", "sort_by"]
    ),

    // ---- token fields ----
    input_token_ids_wrong_length: (
        on_line2(&row("[0]", &[llm("[]", r#","input_token_ids":[1,2,3]"#)])),
        2, "sub_requests[0].input_token_ids", ["3 ids", "10"]
    ),
    output_token_ids_wrong_length: (
        on_line3(&row("[0]", &[llm("[1]", ""), llm("[]", r#","output_token_ids":[7]"#)])),
        3, "sub_requests[1].output_token_ids", ["1 ids", "2"]
    ),
    known_tokens_without_kv_tokens: (
        on_line2(&row("[0]", &[llm("[]", r#","known_tokens":4"#)])),
        2, "sub_requests[0].kv_tokens", ["missing", "together"]
    ),
    kv_tokens_without_known_tokens: (
        on_line2(&row("[0]", &[llm("[]", r#","kv_tokens":4"#)])),
        2, "sub_requests[0].known_tokens", ["missing", "together"]
    ),
    kv_tokens_exceed_known_tokens: (
        on_line3(&row("[0]", &[llm("[]", r#","known_tokens":4,"kv_tokens":5"#)])),
        3, "sub_requests[0].kv_tokens", ["exceeds"]
    ),
    known_tokens_exceed_input_plus_output: (
        on_line2(&row("[0]", &[llm("[]", r#","known_tokens":13,"kv_tokens":5"#)])),
        2, "sub_requests[0].known_tokens", ["exceeds", "12"]
    ),
    tool_call_with_input_tokens: (
        on_line2(&row("[0]", &[
            llm("[1]", ""),
            r#"{"kind":"tool_call","next":[],"input_tokens":5,"output_tokens":0}"#.to_owned(),
        ])),
        2, "sub_requests[1].input_tokens", ["no tokens"]
    ),
    tool_call_with_output_tokens: (
        on_line3(&row("[0]", &[
            llm("[1]", ""),
            r#"{"kind":"tool_call","next":[],"input_tokens":0,"output_tokens":1}"#.to_owned(),
        ])),
        3, "sub_requests[1].output_tokens", ["no tokens"]
    ),
    tool_call_with_model: (
        on_line2(&row("[0]", &[tool("[]", r#","model":"m""#)])),
        2, "sub_requests[0].model", ["llm"]
    ),
    llm_with_zero_output_tokens: (
        on_line2(&row("[0]", &[
            r#"{"kind":"llm","next":[],"input_tokens":10,"output_tokens":0}"#.to_owned(),
        ])),
        2, "sub_requests[0].output_tokens", ["at least 1"]
    ),

    // ---- result-only fields ----
    token_latency_in_workload: (
        on_line2(&row("[0]", &[llm("[]", r#","token_latency":[0.1,0.2]"#)])),
        2, "sub_requests[0].token_latency", ["result"]
    ),
    error_in_workload: (
        on_line3(&row("[0]", &[llm("[]", r#","error":"oops""#)])),
        3, "sub_requests[0].error", ["result"]
    ),
}

/// The valid rows used above are accepted, so each failure is the bad row's.
#[test]
fn the_good_rows_are_accepted() {
    let dir = Dir::new("reject-good");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", &format!("{GOOD0}\n{GOOD1}\n{}\n", row("[0]", &[llm("[1]", ""), tool("[]", "")])));
    TestCommand::new(
        &dir.path,
        &["run", "-q", "--scenario", "s.yaml", "w.jsonl", "-o", "out.jsonl", "--metrics", "m.json"],
    )
    .stdout();
    assert_eq!(dir.files(), ["m.json", "out.jsonl", "s.yaml", "w.jsonl"]);
    assert_eq!(dir.read("out.jsonl").lines().count(), 3);
}

/// A bad scenario is rejected the same way, naming the scenario file and line.
#[test]
fn scenario_unknown_key() {
    let dir = Dir::new("reject-scenario");
    let scenario = LINEAR_SCENARIO.replace("max_num_seqs:", "max_num_seq:");
    assert_eq!(scenario.lines().nth(4), Some("  max_num_seq: 16"));
    dir.create("s.yaml", &scenario);
    dir.create("w.jsonl", &format!("{GOOD0}\n"));
    let stderr = TestCommand::new(
        &dir.path,
        &["run", "--scenario", "s.yaml", "w.jsonl", "-o", "out.jsonl", "--metrics", "m.json"],
    )
    .fails();
    assert_eq!(stderr.lines().count(), 1, "one line expected:\n{stderr}");
    assert!(stderr.starts_with("blis-sweep: s.yaml:5: "), "expected `s.yaml:5:`:\n{stderr}");
    assert!(stderr.contains("max_num_seq"), "should name the key:\n{stderr}");
    assert_eq!(dir.files(), ["s.yaml", "w.jsonl"]);
}

/// The workload is read once, streamed into the simulation: a bad row after
/// many finished requests still leaves nothing on stdout (the results are
/// held until the run is whole) and no file.
#[test]
fn a_late_bad_row_leaves_nothing_behind() {
    let chat = include_str!("../../sweeps/workloads/chat-200.jsonl");
    let mut workload: String = chat.lines().take(199).map(|l| format!("{l}\n")).collect();
    workload.push_str(r#"{"request_id":9999,"arrival_time":1e9,"initial":[0],"sub_requests":[]}"#);
    workload.push('\n');
    let dir = Dir::new("reject-late");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", &workload);
    let out = TestCommand::new(&dir.path, &["run", "-q", "--scenario", "s.yaml", "w.jsonl"]).output();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "{} bytes on stdout", out.stdout.len());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.starts_with("blis-sweep: w.jsonl:200: "), "{stderr}");
    assert_eq!(dir.files(), ["s.yaml", "w.jsonl"]);
}
