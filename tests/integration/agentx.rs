//! AgentX lanes: a property test over random corpora and engines (never
//! more plays out than lanes; a lane freed only when its play's last node
//! has finished, and its next play sent then; recycled plays with fresh
//! block identities, so no play finds another's blocks), and the command
//! end to end on the fixture corpus.

use std::collections::HashSet;
use std::sync::Arc;

use blis_sweep::agentx::{self, AgenticSpec};
use blis_sweep::latency::{Linear, StepPricer};
use blis_sweep::sim::{FinishedRequest, NodeOutcome, RequestStatus, RouterConfig, RunConfig, RunSummary, Sink};
use blis_sweep::workload::import::weka_dag::{Call, Entry, Session, SubagentEntry};
use blis_sweep::workload::{NodeKind, Request};
use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde_json::Value;

use crate::parquet_util::read_columns;
use crate::util::{Dir, TestCommand, rows};

const CASES: u64 = 60;

/// A session of 2–6 main turns with growing prompts and, now and then,
/// subagents of 1–3 calls, some outliving the turn after them.
fn random_session(rng: &mut Xoshiro256PlusPlus, k: usize) -> Session {
    let mut t = 0.0;
    let mut ids: Vec<i64> = vec![1];
    let mut next_id = 2;
    let mut entries = Vec::new();
    let call = |rng: &mut Xoshiro256PlusPlus, t: f64, ids: &[i64]| Call {
        t,
        end: t + rng.random_range(0.05..2.0),
        input: (ids.len() as u32 * 16).max(1) + rng.random_range(0..16),
        output: rng.random_range(1..=24),
        hash_ids: ids.to_vec(),
        model: "m".into(),
    };
    for _ in 0..rng.random_range(2..=6) {
        let c = call(rng, t, &ids);
        t = c.end + rng.random_range(0.0..3.0);
        entries.push(Entry::Main(c));
        if rng.random_bool(0.4) {
            let mut sub_ids = vec![1000 + next_id];
            next_id += 1;
            let mut st = t;
            let mut calls = vec![];
            for _ in 0..rng.random_range(1..=3) {
                let c = call(rng, st, &sub_ids);
                st = c.end + rng.random_range(0.0..1.0);
                sub_ids.push(1000 + next_id);
                next_id += 1;
                calls.push(c);
            }
            entries.push(Entry::Subagent(SubagentEntry { t, agent_id: "a".into(), calls }));
            if rng.random_bool(0.7) {
                t = st;
            }
        }
        ids.push(next_id);
        next_id += 1;
    }
    Session { id: format!("s{k}"), file: "f".into(), line: k as u64 + 1, block_tokens: 16, entries }
}

/// A play as it came out.
struct Play {
    send_us: u64,
    /// When it left: its last node's end, or a failed node's start; `None`
    /// when the horizon cut it short.
    left_us: Option<u64>,
    finish_us: Option<u64>,
    nodes: Vec<NodeOutcome>,
    request: Request,
}

/// Every play as it came out.
#[derive(Default)]
struct Plays(Vec<Play>, Option<RunSummary>);

impl Sink for Plays {
    fn request_done(&mut self, r: &FinishedRequest) -> std::io::Result<()> {
        self.0.push(Play {
            send_us: r.send_us,
            left_us: (r.status != RequestStatus::Unfinished).then(|| {
                r.nodes.iter().filter_map(|n| n.finish_us.or(n.start_us)).max().unwrap_or(r.send_us).max(r.send_us)
            }),
            finish_us: r.finish_us,
            nodes: r.nodes.clone(),
            request: r.request.clone(),
        });
        Ok(())
    }
    fn finish(&mut self, end: &RunSummary) -> std::io::Result<()> {
        self.1 = Some(end.clone());
        Ok(())
    }
}

fn block_ids(r: &Play) -> HashSet<u64> {
    r.request
        .sub_requests
        .iter()
        .filter_map(|s| match &s.kind {
            NodeKind::Llm(c) => c.prompt_blocks.as_ref().map(|b| b.ids.clone()),
            NodeKind::ToolCall { .. } => None,
        })
        .flatten()
        .collect()
}

#[test]
fn lanes_hold_whole_trees_and_recycle_with_fresh_identities() {
    let mut checked_recycled = 0;
    for case in 0..CASES {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(case);
        let corpus: Arc<[Session]> = (0..rng.random_range(1..=4)).map(|k| random_session(&mut rng, k)).collect();
        let lanes = rng.random_range(1..=5);
        let spec = AgenticSpec {
            lanes,
            snapshot: if rng.random_bool(0.7) {
                Some(blis_sweep::workload::agentic::SnapshotSpec { min: 0.0, max: 1.0 })
            } else {
                None
            },
            warmup_per_lane: rng.random_range(0..=3),
            profile_s: rng.random_range(5.0..40.0),
            idle_cap_s: if rng.random_bool(0.5) { Some(1.0) } else { None },
            grace_s: rng.random_range(0.0..5.0),
        };
        let agentic = spec.resolve().unwrap();
        let engine = crate::properties::random_engine(&mut rng);
        let replicas = rng.random_range(1..=3);
        let latency = StepPricer::Linear(Linear::new(&[rng.random_range(100.0..5000.0), 5.0, 20.0]).unwrap());
        let config = RunConfig::aggregated(engine, replicas, RouterConfig::default(), latency);
        let mut out = Plays::default();
        let (report, _) = agentx::run(&config, corpus, &agentic, case, &mut out).unwrap();
        let end = out.1.as_ref().unwrap().sim_end_us;
        let plays = &out.0;
        let ctx = format!("case {case}: {lanes} lanes, {} plays", plays.len());
        assert!(plays.len() as u32 >= lanes.min(1), "{ctx}");
        // At most `lanes` out at any time (a play ending when another is
        // sent frees its lane first).
        let mut events: Vec<(u64, i64)> = Vec::new();
        for p in plays {
            events.push((p.send_us, 1));
            events.push((p.left_us.unwrap_or(end), -1));
        }
        events.sort();
        let mut out_now = 0;
        for (_, d) in events {
            out_now += d;
            assert!(out_now <= i64::from(lanes), "{ctx}: {out_now} plays out");
        }
        assert!(report.max_plays_in_flight <= u64::from(lanes), "{ctx}");
        // A play is over when its last node is, and only then does its lane
        // send the next: every later play is sent when an earlier one ended.
        let mut freed: Vec<u64> = Vec::new();
        for (i, p) in plays.iter().enumerate() {
            if let Some(f) = p.finish_us {
                let last = p.nodes.iter().filter_map(|n| n.finish_us).max().unwrap_or(p.send_us);
                assert_eq!(f, last.max(p.send_us), "{ctx}: play {i} ends with its last node");
            }
            if i >= lanes as usize {
                let k = freed.iter().position(|&t| t == p.send_us);
                let k = k.unwrap_or_else(|| panic!("{ctx}: play {i} sent at {} when no lane was freed", p.send_us));
                freed.swap_remove(k);
                checked_recycled += 1;
            }
            if let Some(f) = p.left_us {
                freed.push(f);
            }
        }
        // Fresh identities: no block of one play is in another, and a play's
        // first call finds nothing cached.
        let mut seen: HashSet<u64> = HashSet::new();
        for (i, p) in plays.iter().enumerate() {
            let ids = block_ids(p);
            assert!(ids.is_disjoint(&seen), "{ctx}: play {i} shares a block with an earlier play");
            seen.extend(ids);
            let first = p.request.initial[0] as usize;
            assert_eq!(p.nodes[first].cached_tokens, 0, "{ctx}: play {i}'s first call hit another play's cache");
        }
    }
    assert!(checked_recycled > 100, "recycled plays checked: {checked_recycled}");
}

use crate::weka::{H100_8B, SESSIONS};

#[test]
fn agentx_runs_lanes_of_plays_and_reports_the_window() {
    let dir = Dir::new("agentx");
    dir.create("w.jsonl", SESSIONS);
    dir.create("s.yaml", H100_8B);
    let args =
        ["agentx", "-q", "-s", "s.yaml", "w.jsonl", "--lanes", "2", "--profile", "120", "--warmup-per-lane", "2"];
    TestCommand::new(&dir.path, &[&args[..], &["-o", "r.jsonl", "--metrics", "m.json"]].concat()).stdout();
    let m: Value = serde_json::from_str(&dir.read("m.json")).unwrap();
    let results = rows(&dir.read("r.jsonl"));
    assert_eq!(results.len() as u64, m["plays_sent"].as_u64().unwrap());
    assert!(m["calls"].as_u64().unwrap() > 20, "{m}");
    assert!(m["max_plays_in_flight"].as_u64().unwrap() <= 2);
    assert!(m["warmup_end_s"].as_f64().unwrap() > 0.0);
    assert_eq!(m["profile_s"], 120.0);
    // Plays are named session#play; the two lanes start on the first two sessions.
    assert_eq!(results[0]["request_id"], "session_0000#0");
    assert_eq!(results[1]["request_id"], "session_0001#1");
    // The same seed, the same run; the report on stdout without --metrics.
    let again = TestCommand::new(&dir.path, &args).stdout();
    assert_eq!(serde_json::from_str::<Value>(&again).unwrap(), m);
    // Bad values name their flag; a corpus with nothing to measure is refused.
    for (flag, value) in [("--lanes", "0"), ("--snapshot", "0.9,0.1"), ("--idle-cap", "soon"), ("--profile", "0")] {
        let mut a: Vec<&str> = args.to_vec();
        if let Some(i) = a.iter().position(|x| *x == flag) {
            a[i + 1] = value;
        } else {
            a.extend([flag, value]);
        }
        let err = TestCommand::new(&dir.path, &a).fails();
        assert!(err.starts_with(&format!("blis-sweep: {flag}: ")), "{err}");
    }
    let err = TestCommand::new(&dir.path, &[&args[..], &["-o", "w.jsonl"]].concat()).fails();
    assert!(err.contains("-o: w.jsonl is the same file as the input CORPUS"), "{err}");
    assert_eq!(dir.read("w.jsonl"), SESSIONS, "the corpus is untouched");
    let one = r#"{"id":"x","block_size":64,"hash_id_scope":"local","requests":[{"t":0,"type":"n","in":10,"out":2}]}"#;
    dir.create("one.jsonl", &format!("{one}\n"));
    let err = TestCommand::new(&dir.path, &["agentx", "-s", "s.yaml", "one.jsonl", "--lanes", "1"]).fails();
    assert!(err.contains("one.jsonl: none of the 1 sessions has two main-agent turns"), "{err}");
}

#[test]
fn a_plan_sweeps_agentx_lanes_with_and_without_subagents() {
    let dir = Dir::new("agentx-plan");
    dir.create("w.jsonl", SESSIONS);
    dir.create("s.yaml", H100_8B);
    let plan = "name: agentx\nworkload:\n  import: weka\n  path: w.jsonl\n  agentic: {lanes: 2, profile_s: 120, warmup_per_lane: 2}\n\
                scenarios: [s.yaml]\ngrid:\n  overrides: {workload.agentic.lanes: [1, 4], workload.drop_subagents: [false, true]}\n\
                output: out\n";
    dir.create("plan.yaml", plan);
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    let cols =
        ["agentx_lanes", "agentx_calls", "agentx_ttft_mean_ms", "agentx_main_ttft_mean_ms", "status", "overrides"];
    let runs = read_columns(&dir.join("out/runs.parquet"), &cols);
    assert_eq!(runs.len(), 4);
    for r in &runs {
        assert_eq!(r[4], "ok", "{r:?}");
        assert!(r[1].parse::<u64>().unwrap() > 5, "{r:?}");
        assert!(r[5].contains(&format!("\"workload_agentic_lanes\":{}", r[0])), "{r:?}");
        if r[5].contains("\"workload_drop_subagents\":true") {
            assert_eq!(r[2], r[3], "without subagents every call is the main agent's: {r:?}");
        }
    }
    // Each run's metrics carry the window's report.
    let run_dirs: Vec<_> = std::fs::read_dir(dir.join("out/runs")).unwrap().map(|e| e.unwrap().path()).collect();
    let m: Value = serde_json::from_str(&std::fs::read_to_string(run_dirs[0].join("metrics.json")).unwrap()).unwrap();
    assert!(m["agentx"]["warmup_end_s"].as_f64().unwrap() > 0.0, "{m}");
    // Its lanes are the load: no other axis beside them.
    dir.create("bad.yaml", &plan.replace("grid:\n", "grid:\n  concurrency: [4]\n").replace("out\n", "out2\n"));
    let err = TestCommand::new(&dir.path, &["bad.yaml"]).fails();
    assert!(err.contains("grid.concurrency: an AgentX load's lanes are its client"), "{err}");
    dir.create("bad2.yaml", &plan.replace("import: weka", "import: mooncake"));
    let err = TestCommand::new(&dir.path, &["bad2.yaml"]).fails();
    assert!(err.contains("workload.agentic: an AgentX load plays Weka sessions"), "{err}");
}

#[test]
fn sibling_group_affinity_keeps_each_agent_on_one_replica() {
    let dir = Dir::new("agentx-siblings");
    dir.create("w.jsonl", SESSIONS);
    let cluster = |affinity: &str| {
        format!("{H100_8B}replicas: 4\nrouter: {{policy: round-robin, affinity: {affinity}}}\n")
            .replace("name: h100-8b", "name: c")
    };
    dir.create("node.yaml", &cluster("node"));
    dir.create("siblings.yaml", &cluster("sibling-group"));
    let run = |s: &str| {
        let args = ["run", "-q", "-s", s, "--input", "weka:w.jsonl", "--session-rate", "0.05", "-o", "r.jsonl"];
        TestCommand::new(&dir.path, &[&args[..], &["--metrics", "m.json"]].concat()).stdout();
        let m: Value = serde_json::from_str(&dir.read("m.json")).unwrap();
        (rows(&dir.read("r.jsonl")), m["kv_cache_hit_rate"].as_f64().unwrap())
    };
    let (pinned, pinned_hits) = run("siblings.yaml");
    let sessions = rows(SESSIONS);
    for (r, s) in pinned.iter().zip(&sessions) {
        let nodes = r["sub_requests"].as_array().unwrap();
        let replica = |i: usize| nodes[i]["replica"].as_u64().unwrap();
        let mains = s["requests"].as_array().unwrap().iter().filter(|e| e["type"] != "subagent").count();
        assert!((0..mains).all(|i| replica(i) == replica(0)), "{}: the main agent on one replica", s["id"]);
        // Each subagent's chain (one call after another) stays on one replica.
        for (i, n) in nodes.iter().enumerate().skip(mains) {
            for j in n["next"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize) {
                if j > i {
                    assert_eq!(replica(j), replica(i), "{}: chain node {i} → {j}", s["id"]);
                }
            }
        }
    }
    let (_, spread_hits) = run("node.yaml");
    assert!(pinned_hits > spread_hits + 0.2, "pinned {pinned_hits} vs round-robin per call {spread_hits}");
    let err = TestCommand::new(&dir.path, &["agentx", "-s", "bad.yaml", "w.jsonl", "--lanes", "1"]).fails();
    assert!(err.contains("bad.yaml"), "{err}");
    dir.create("bad.yaml", &cluster("siblings"));
    let err = TestCommand::new(&dir.path, &["agentx", "-s", "bad.yaml", "w.jsonl", "--lanes", "1"]).fails();
    assert!(err.contains("router.affinity: `siblings`: use `node`, `request` or `sibling-group`"), "{err}");
}
