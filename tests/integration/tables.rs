//! The sweep's tables have one schema whatever the plan (so one DuckDB glob
//! reads several plans' outputs): the deployment as columns, counts as
//! BIGINT, overrides in one `overrides` column; one `requests` row per
//! request DAG and one `nodes` row per llm call; `request_id` text in every
//! plan, with `request_index` (BIGINT, input order) beside it.

use std::path::Path;

use crate::parquet_util::{read_columns, read_table};
use crate::util::{Dir, LINEAR_SCENARIO, TestCommand};

const CHAT: &str = include_str!("../../sweeps/workloads/chat-200.jsonl");

/// Three requests, each an llm call, a tool call, then a second llm call.
fn dags(id: impl Fn(usize) -> String) -> String {
    (0..3)
        .map(|i| {
            format!(
                r#"{{"request_id": {}, "arrival_time": {}, "initial": [0], "sub_requests": [{{"kind": "llm", "input_tokens": 64, "output_tokens": 8, "next": [1]}}, {{"kind": "tool_call", "input_tokens": 0, "output_tokens": 0, "next": [2], "duration": 0.05}}, {{"kind": "llm", "input_tokens": 96, "output_tokens": 4, "next": []}}]}}"#,
                id(i),
                i as f64 * 0.1
            ) + "\n"
        })
        .collect()
}

/// Runs a plan with `workload` and `grid` in `dir`, into `dir/NAME`.
fn sweep(dir: &Dir, name: &str, workload: &str, grid: &str) {
    dir.create(&format!("{name}.jsonl"), workload);
    dir.create(
        &format!("{name}.yaml"),
        &format!(
            "name: {name}\nworkload: {{path: {name}.jsonl}}\nscenarios: [s.yaml]\ngrid:\n{grid}\noutput: {name}\n"
        ),
    );
    TestCommand::new(&dir.path, &["-q", "--tokens", &format!("{name}.yaml")]).stdout();
}

/// The schema of each table of a sweep output (every part of a table must agree).
fn schemas(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for table in ["requests", "nodes", "tokens"] {
        let mut seen: Option<String> = None;
        for e in std::fs::read_dir(root.join(table)).unwrap() {
            let (schema, _) = read_table(&e.unwrap().path());
            assert!(seen.as_ref().is_none_or(|s| *s == schema), "{table}: two schemas");
            seen = Some(schema);
        }
        out.push((table.to_owned(), seen.unwrap()));
    }
    out.push(("runs".to_owned(), read_table(&root.join("runs.parquet")).0));
    out
}

fn column_type<'a>(schema: &'a str, name: &str) -> &'a str {
    let field = schema.split(';').find(|f| f.starts_with(&format!("{name}:"))).unwrap_or_else(|| panic!("{name}"));
    field.split(':').nth(1).unwrap()
}

#[test]
fn two_different_plans_write_one_schema() {
    let dir = Dir::new("tables-schema");
    dir.create("s.yaml", LINEAR_SCENARIO);
    sweep(&dir, "chat", CHAT, "  concurrency: [null, 4]\n  overrides:\n    engine.max_num_seqs: [8, 16]");
    sweep(
        &dir,
        "agents",
        &dags(|i| i.to_string()),
        "  seed: [1]\n  overrides:\n    tp: [2]\n    replicas: [2]\n    router.policy: [least-requests]",
    );
    let chat = schemas(&dir.join("chat"));
    assert_eq!(chat, schemas(&dir.join("agents")));
    for (table, schema) in &chat {
        for column in ["model", "hardware", "dtype", "latency_model", "router_policy", "overrides"] {
            assert!(column_type(schema, column).starts_with("Dictionary(Int32, Utf8"), "{table}.{column}");
        }
        for column in ["tp", "replicas", "gpus", "kv_blocks", "engine_max_num_seqs", "concurrency", "seed"] {
            assert_eq!(column_type(schema, column), "Int64", "{table}.{column}");
        }
        if table != "runs" {
            assert_eq!(column_type(schema, "request_id"), "Utf8", "{table}");
            assert_eq!(column_type(schema, "request_index"), "Int64", "{table}");
        }
    }
    let runs = &chat.iter().find(|(t, _)| t == "runs").unwrap().1;
    for column in ["completed_requests", "total_output_tokens", "engine_steps", "preemption_count"] {
        assert_eq!(column_type(runs, column), "Int64", "runs.{column}");
    }
    // One time unit a table: milliseconds in runs, seconds per request.
    assert!(runs.contains("sim_duration_ms:") && runs.contains("wall_ms:") && !runs.contains("_s:"), "{runs}");

    // The deployment as resolved, the overrides as given.
    let cols = ["tp", "replicas", "gpus", "router_policy", "engine_max_num_seqs", "kv_blocks", "overrides"];
    let runs = read_columns(&dir.join("agents/runs.parquet"), &cols);
    assert_eq!(
        runs,
        [["2", "2", "4", "least-requests", "16", "1000", r#"{"replicas":2,"router_policy":"least-requests","tp":2}"#]]
    );
    // One requests row per DAG (its E2E, its calls), one nodes row per llm call.
    let part = |table: &str| {
        let d = dir.join("agents").join(table);
        std::fs::read_dir(d).unwrap().next().unwrap().unwrap().path()
    };
    let requests = read_columns(&part("requests"), &["request_id", "status", "llm_calls", "tool_calls", "e2e_s"]);
    assert_eq!(requests.len(), 3);
    assert!(requests.iter().all(|r| r[1..4] == ["completed", "2", "1"]), "{requests:?}");
    let nodes = read_columns(&part("nodes"), &["request_id", "node", "ttft_s"]);
    let ids: Vec<[&str; 2]> = nodes.iter().map(|r| [r[0].as_str(), r[1].as_str()]).collect();
    assert_eq!(ids, [["0", "0"], ["0", "2"], ["1", "0"], ["1", "2"], ["2", "0"], ["2", "2"]]);
    // So the mean of E2E over the requests table is the run's mean E2E.
    let mean_ms = requests.iter().map(|r| r[4].parse::<f64>().unwrap()).sum::<f64>() / 3.0 * 1e3;
    let run_mean: f64 = read_columns(&dir.join("agents/runs.parquet"), &["e2e_mean_ms"])[0][0].parse().unwrap();
    assert!((mean_ms - run_mean).abs() < 1e-3, "{mean_ms} vs {run_mean}");
}

#[test]
fn request_ids_are_text_in_every_plan_with_their_input_index() {
    let dir = Dir::new("tables-ids");
    dir.create("s.yaml", LINEAR_SCENARIO);
    sweep(&dir, "text", &dags(|i| format!("\"agent-{i}\"")), "  seed: [1]");
    sweep(&dir, "int", &dags(|i| i.to_string()), "  seed: [1]");
    // An integer id past a BIGINT's range is text like any other.
    sweep(&dir, "big", &dags(|i| (u64::MAX - i as u64).to_string()), "  seed: [1]");
    let text = schemas(&dir.join("text"));
    assert_eq!(text, schemas(&dir.join("int")));
    assert_eq!(text, schemas(&dir.join("big")));
    for (table, schema) in &text {
        if table != "runs" {
            assert!(schema.contains("request_id:Utf8:false;request_index:Int64:false"), "{table}: {schema}");
        }
    }
    let ids = |plan: &str, table: &str, columns: &[&str]| {
        let part = std::fs::read_dir(dir.join(plan).join(table)).unwrap().next().unwrap().unwrap().path();
        read_columns(&part, columns)
    };
    assert_eq!(
        ids("text", "requests", &["request_id", "request_index"]),
        [["agent-0", "0"], ["agent-1", "1"], ["agent-2", "2"]]
    );
    let max = u64::MAX.to_string();
    assert_eq!(ids("big", "requests", &["request_id"])[0], [max]);
    // Every llm call's row carries its request's key.
    let nodes = ids("int", "nodes", &["request_id", "request_index", "node"]);
    assert_eq!(nodes[2..4], [["1", "1", "0"], ["1", "1", "2"]]);
}
