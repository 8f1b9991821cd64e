//! Step-for-step conformance with vLLM's own scheduler. The golden traces
//! in `tests/data/vllm-conformance/golden/` were recorded by driving vLLM's
//! real `Scheduler` / `AsyncScheduler` (pinned releases from PyPI, CPU
//! platform, a fake model runner) with `scripts/vllm-conformance/record.sh`;
//! here the same workloads run in the simulator with every step costing
//! 1000 µs, so a step's start time is its index, and every step must agree:
//! tokens scheduled per request, admissions with their prefix-cache hit,
//! preemptions, KV blocks in use, and the step of every token delivered.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use blis_sweep::latency::{DraftCost, Linear, LoraPricing, StepPricer};
use blis_sweep::scenario::{ReleaseBehaviour, VllmVersion};
use blis_sweep::sim::{
    ConnectorKind, EngineConfig, EngineStep, FinishedRequest, KvGroupKind, LoraConfig, LoraLoad, RequestStatus,
    ResultSink, SchedulingPolicy, Simulation, SpecDecode, SpecMethod,
};
use blis_sweep::workload::{LlmCall, NodeKind, Request, RequestId, SubRequest};
use serde_json::Value;

/// The releases and modes recorded, each a golden file.
const GOLDEN: [&str; 6] = ["0.15.1-sync", "0.15.1-async", "0.19.0-sync", "0.19.0-async", "0.33.0-sync", "0.33.0-async"];
/// Every step costs this much: step k starts at k·STEP_US.
const STEP_US: u64 = 1000;

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/vllm-conformance")
}

/// The recorder's token ids (`scripts/vllm-conformance/cases.py`, `tok`).
fn tok(seed: u64, stream: u64, i: u64) -> u32 {
    let mut z = ((seed << 40) ^ (stream << 20) ^ i).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    100 + (z % 30000) as u32
}

/// The case's prompts, as the recorder builds them.
pub(crate) fn prompts(case: &Value) -> Vec<Vec<u32>> {
    let seed = case["seed"].as_u64().unwrap();
    let prefixes: Vec<u64> =
        case["prefixes"].as_array().map_or(vec![], |a| a.iter().map(|v| v.as_u64().unwrap()).collect());
    let mut out: Vec<Vec<u32>> = Vec::new();
    for (r, req) in case["requests"].as_array().unwrap().iter().enumerate() {
        if let Some(k) = req["copy_of"].as_u64() {
            out.push(out[k as usize].clone());
            continue;
        }
        let len = req["prompt_len"].as_u64().unwrap();
        let prefix = req["prefix"].as_u64().map(|g| (g, prefixes[g as usize]));
        out.push(
            (0..len)
                .map(|i| match prefix {
                    Some((g, plen)) if i < plen => tok(seed, (1 << 19) + g, i),
                    _ => tok(seed, r as u64, i),
                })
                .collect(),
        );
    }
    out
}

fn engine(case: &Value, version: &str, async_scheduling: bool) -> EngineConfig {
    let e = &case["engine"];
    let n = |k: &str| e[k].as_u64().unwrap() as u32;
    let release = VllmVersion::parse(version).unwrap().behaviour();
    EngineConfig {
        max_num_seqs: n("max_num_seqs"),
        max_num_batched_tokens: n("max_num_batched_tokens"),
        max_model_len: n("max_model_len"),
        block_size: n("block_size"),
        num_gpu_blocks: n("num_gpu_blocks"),
        enable_prefix_caching: e["enable_prefix_caching"].as_bool().unwrap(),
        long_prefill_token_threshold: n("long_prefill_token_threshold"),
        async_scheduling,
        scheduler_reserve_full_isl: release.scheduler_reserve_full_isl,
        lone_request_skips_prefill_threshold: release.lone_request_skips_prefill_threshold,
        free_uncached_blocks_first: release.free_uncached_blocks_first,
        self_preemption_continues: release.self_preemption_continues,
        kv_connector: ConnectorKind::None,
        kv_offload: None,
        lora: case.get("lora").map(|l| lora(l, release)),
        speculative: case.get("speculative").map(|s| speculative(s).for_release(release.eagle_hashes_next_token)),
        // vLLM's `--scheduling-policy`: "fcfs" (the default) unless the case asks for "priority".
        scheduling_policy: if e["scheduling_policy"] == "priority" {
            SchedulingPolicy::Priority
        } else {
            SchedulingPolicy::Fcfs
        },
        kv_groups: case.get("kv_groups").map_or_else(Vec::new, kv_groups),
        window_admission_cap: release.window_admission_cap,
        window_lags_in_flight: release.window_lags_in_flight,
        // Absent: the release's default (0 from 0.30); null: every block cached.
        prefix_cache_retention_interval: match e.get("prefix_cache_retention_interval") {
            None => release.window_cache_retention.then_some(0),
            Some(v) => v.as_u64().map(|r| r as u32),
        },
        attention_span: Default::default(),
    }
}

/// A hybrid case's `kv_groups` (`scripts/vllm-conformance/README.md`,
/// "Hybrid KV cache groups"): one layer each, in vLLM's group order.
fn kv_groups(groups: &Value) -> Vec<KvGroupKind> {
    let n = |g: &Value, k: &str| g[k].as_u64().unwrap() as u32;
    groups
        .as_array()
        .unwrap()
        .iter()
        .map(|g| match g["kind"].as_str().unwrap() {
            "full" => KvGroupKind::Full,
            "sliding_window" => KvGroupKind::SlidingWindow { window: n(g, "window") },
            "chunked_local" => KvGroupKind::ChunkedLocal { chunk: n(g, "chunk") },
            other => panic!("kv group kind {other}"),
        })
        .collect()
}

/// A feature case's `speculative` (`scripts/vllm-conformance/README.md`,
/// "Features"): the drafter free, so every step still costs `STEP_US`.
fn speculative(spec: &Value) -> SpecDecode {
    let method = SpecMethod::parse(spec["method"].as_str().unwrap()).unwrap();
    let k = spec["k"].as_u64().unwrap() as u32;
    let alphas: Vec<f64> = match spec["rate"].as_f64() {
        Some(r) => (1..=k).map(|j| r.powi(j as i32)).collect(),
        None => spec["acceptance"].as_array().unwrap().iter().map(|a| a.as_f64().unwrap()).collect(),
    };
    let ppm = alphas.iter().map(|a| (a * 1e6).round() as u32).collect();
    SpecDecode::new(method, k, ppm, spec["seed"].as_u64().unwrap_or(0), DraftCost::FREE)
}

/// A feature case's `lora`: adapters load and run in no time, so every
/// step still costs `STEP_US`; only vLLM's `max_loras` rule and the
/// adapter-salted prefix hashes remain.
fn lora(l: &Value, release: ReleaseBehaviour) -> LoraConfig {
    let max_loras = l["max_loras"].as_u64().unwrap() as u32;
    LoraConfig {
        max_loras,
        max_lora_rank: l["max_lora_rank"].as_u64().unwrap() as u32,
        max_cpu_loras: max_loras,
        every_running_counts: release.lora_counts_every_running_request,
        skipped_queue_first: release.lora_skipped_queue_first,
        load: LoraLoad::Fixed { us: 0 },
        pricing: LoraPricing {
            layers: 0,
            dims_per_layer: 0,
            activation_elements_per_layer: 0,
            peak_flops: 1,
            bandwidth: 1,
        },
    }
}

/// A step as both sides record it: `[t, [[req, tokens]], [[req, hit]], [req], kv_blocks_used]`.
type Row = (u64, Vec<(u64, u32)>, Vec<(u64, u32)>, Vec<u64>, u32);

#[derive(Default)]
struct Recorder {
    steps: Vec<Row>,
    done: Vec<FinishedRequest>,
}

fn id(r: &RequestId) -> u64 {
    match r {
        RequestId::Int(n) => *n,
        RequestId::Str(s) => panic!("unexpected id {s}"),
    }
}

impl ResultSink for Recorder {
    fn request_done(&mut self, request: FinishedRequest) {
        self.done.push(request);
    }

    fn engine_step(&mut self, s: &EngineStep) {
        assert_eq!(s.start_us % STEP_US, 0, "a step started off the step grid");
        assert_eq!(s.duration_us, STEP_US);
        self.steps.push((
            s.start_us / STEP_US,
            s.scheduled.iter().map(|(n, k)| (id(&n.request_id), *k)).collect(),
            s.admitted.iter().map(|(n, k)| (id(&n.request_id), *k)).collect(),
            s.preempted.iter().map(|n| id(&n.request_id)).collect(),
            s.kv_blocks_used,
        ));
    }
}

/// Replays `case` in the simulator: (steps, token steps per request, rejected).
/// Untraced (`traced` false), the steps are not recorded and the engine
/// keeps steady decodes (`src/sim/engine/steady.rs`).
fn simulate(case: &Value, version: &str, async_scheduling: bool, traced: bool) -> (Vec<Row>, Vec<Vec<u64>>, Vec<u64>) {
    let latency = StepPricer::Linear(Linear::new(&[STEP_US as f64, 0.0, 0.0]).unwrap());
    let mut sim = Simulation::new(engine(case, version, async_scheduling), latency);
    sim.set_step_trace(traced);
    sim.check_invariants(true);
    // The recorder aborts a request during the step ending at arrival + T
    // steps: half a step before that boundary.
    let timeout = case["timeout_steps"].as_u64().map(|t| t * STEP_US - STEP_US / 2);
    sim.set_request_timeout(timeout);
    let mut rec = Recorder::default();
    let requests = case["requests"].as_array().unwrap();
    for (r, (req, prompt)) in requests.iter().zip(prompts(case)).enumerate() {
        let output_tokens = req["output_len"].as_u64().unwrap() as u32;
        // The fake model runner always samples token 7.
        let call = LlmCall::for_prompt(prompt, output_tokens)
            .with_output_ids(vec![7; output_tokens as usize])
            .with_lora(req["lora"].as_str().map(str::to_owned))
            // vLLM's per-request priority (0 unless the case sets it; lower is served first).
            .with_priority(req["priority"].as_i64().unwrap_or(0) as i32);
        let sub = SubRequest { next: vec![], interval: 0.0, kind: NodeKind::Llm(call), result: None };
        let arrival = req["arrival_step"].as_u64().unwrap() as f64 * STEP_US as f64 / 1e6;
        let request = Request {
            traffic: Default::default(),
            request_id: RequestId::Int(r as u64),
            arrival_time: arrival,
            initial: vec![0],
            sub_requests: vec![sub],
        };
        assert!(sim.add_request(request, &mut rec));
    }
    sim.finish(&mut rec);
    let mut tokens = vec![Vec::new(); requests.len()];
    let mut rejected = Vec::new();
    for r in &rec.done {
        let i = id(&r.request.request_id);
        if r.status == RequestStatus::Unservable {
            rejected.push(i);
        }
        tokens[i as usize] = r.nodes[0].token_times_us.iter().map(|t| t / STEP_US - 1).collect();
    }
    rejected.sort_unstable();
    (rec.steps, tokens, rejected)
}

fn golden_row(v: &Value) -> Row {
    let pairs = |v: &Value| -> Vec<(u64, u32)> {
        v.as_array().unwrap().iter().map(|p| (p[0].as_u64().unwrap(), p[1].as_u64().unwrap() as u32)).collect()
    };
    (
        v[0].as_u64().unwrap(),
        pairs(&v[1]),
        pairs(&v[2]),
        v[3].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect(),
        v[4].as_u64().unwrap() as u32,
    )
}

/// Where the two sides first differ, or `None`.
pub(crate) fn compare(case: &Value, golden: &Value, version: &str, async_scheduling: bool) -> Option<String> {
    let (steps, tokens, rejected) = simulate(case, version, async_scheduling, true);
    // Untraced, every request's tokens come out in the same steps.
    let (_, untraced, untraced_rejected) = simulate(case, version, async_scheduling, false);
    if (&untraced, &untraced_rejected) != (&tokens, &rejected) {
        return Some(format!("untraced (steady decodes) the tokens differ: {untraced:?} against {tokens:?}"));
    }
    // vLLM records a schedule() that scheduled nothing but preempted (a
    // request that cannot grow preempts itself); the simulator reports those
    // preemptions with the next step.
    let mut want: Vec<Row> = Vec::new();
    let mut carried = Vec::new();
    for row in golden["steps"].as_array().unwrap().iter().map(golden_row) {
        if row.1.is_empty() {
            assert!(row.2.is_empty(), "an empty step admitted something");
            carried.extend(row.3);
            continue;
        }
        let mut row = row;
        row.3.splice(0..0, carried.drain(..));
        want.push(row);
    }
    for (i, (got, want)) in steps.iter().zip(&want).enumerate() {
        if got != want {
            let from = i.saturating_sub(3);
            let context: Vec<String> = steps[from..i].iter().map(|r| format!("    both {r:?}")).collect();
            return Some(format!("step row {i}:\n{}\n    vLLM {want:?}\n    simulator {got:?}", context.join("\n")));
        }
    }
    if steps.len() != want.len() {
        return Some(format!("{} steps in vLLM, {} in the simulator", want.len(), steps.len()));
    }
    for (r, want) in golden["tokens"].as_array().unwrap().iter().enumerate() {
        let want: Vec<u64> = want.as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
        if tokens[r] != want {
            return Some(format!("request {r} token steps: vLLM {want:?}, simulator {:?}", tokens[r]));
        }
    }
    let want: Vec<u64> = golden["rejected"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    (rejected != want).then(|| format!("rejected: vLLM {want:?}, simulator {rejected:?}"))
}

fn cases() -> BTreeMap<String, Value> {
    cases_in(&data_dir().join("cases"))
}

fn cases_in(dir: &Path) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let case: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        out.insert(case["name"].as_str().unwrap().to_owned(), case);
    }
    out
}

/// Replays every case of `cases` in each golden file `dir/golden/<name>.jsonl`
/// of `names` (`<release>-<sync|async>`), every case recorded in each: where
/// the simulator differs, and how many runs were compared.
fn replay_all(dir: &Path, names: &[&str], cases: &BTreeMap<String, Value>) -> (Vec<String>, usize) {
    let mut failures = Vec::new();
    let mut checked = 0;
    for name in names {
        let (version, mode) = name.split_once('-').unwrap();
        let path = dir.join(format!("golden/{name}.jsonl"));
        let Ok(text) = std::fs::read_to_string(&path) else {
            failures.push(format!("{name}: {} missing", path.display()));
            continue;
        };
        let mut seen = 0;
        for line in text.lines() {
            let golden: Value = serde_json::from_str(line).unwrap();
            assert_eq!(golden["vllm"], version);
            let case = &cases[golden["case"].as_str().unwrap()];
            if let Some(why) = compare(case, &golden, version, mode == "async") {
                failures.push(format!("{name} {}: {why}", golden["case"]));
            }
            seen += 1;
        }
        assert_eq!(seen, cases.len(), "{name}: every case recorded");
        checked += seen;
    }
    (failures, checked)
}

#[test]
fn every_recorded_workload_agrees_with_vllm_step_for_step() {
    let cases = cases();
    assert!(cases.keys().filter(|k| k.starts_with("rand-")).count() >= 50, "at least 50 random workloads");
    let (failures, checked) = replay_all(&data_dir(), &GOLDEN, &cases);
    assert!(failures.is_empty(), "{} of {checked} runs diverge:\n{}", failures.len(), failures.join("\n"));
}

/// The hybrid KV cache traces (`tests/data/vllm-conformance/hybrid/`: a
/// full-attention group and a sliding-window group, or a chunked local one,
/// sharing one block pool; recorded from vLLM 0.33.0's scheduler by
/// `scripts/vllm-conformance/record.sh`): the simulator with the same KV
/// cache groups agrees step for step, KV blocks in use included.
#[test]
fn hybrid_kv_cache_groups_agree_with_vllm_step_for_step() {
    let dir = data_dir().join("hybrid");
    let cases = cases_in(&dir.join("cases"));
    assert!(cases.values().all(|c| c["kv_groups"].as_array().is_some_and(|g| g.len() >= 2 || g[0]["kind"] != "full")));
    let (failures, checked) = replay_all(&dir, &["0.33.0-sync", "0.33.0-async"], &cases);
    assert!(failures.is_empty(), "{} of {checked} runs diverge:\n{}", failures.len(), failures.join("\n"));
}
