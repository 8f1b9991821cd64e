//! LoRA adapters (`engine.lora`, a workload's `lora`, TraceV2's `adapter`):
//! vLLM's `max_loras` rule on random workloads, prefixes that never match
//! across adapters, a load delay computed by hand, and bad input refused
//! with its file, line and field.

use std::collections::{HashMap, HashSet};

use blis_sweep::latency::{Linear, LoraPricing, StepPricer};
use blis_sweep::sim::{KvTransferConfig, LoraConfig, LoraLoad, PdDecider, PoolConfig, Simulation};
use blis_sweep::workload::{LlmCall, NodeKind, Request, RequestId, SubRequest};
use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::properties::{random_engine, random_request, random_router};
use crate::util::{Dir, LINEAR_SCENARIO, Steps, TestCommand, latencies_us, rows};

/// An adapter table the size of Llama-3.1-8B's at rank 16 on one H100.
fn lora(rng: &mut Xoshiro256PlusPlus) -> LoraConfig {
    let max_loras = rng.random_range(1..=3);
    LoraConfig {
        max_loras,
        max_lora_rank: 16,
        max_cpu_loras: max_loras + rng.random_range(0..=2),
        every_running_counts: rng.random_bool(0.5),
        skipped_queue_first: rng.random_bool(0.5),
        load: if rng.random_bool(0.5) {
            LoraLoad::Fixed { us: rng.random_range(0..5_000) }
        } else {
            LoraLoad::Bandwidth { cpu_bytes_per_s: 64_000_000_000, disk_bytes_per_s: 7_000_000_000 }
        },
        pricing: LoraPricing {
            layers: 32,
            dims_per_layer: 69_632,
            activation_elements_per_layer: 112_640,
            peak_flops: 989_000_000_000_000,
            bandwidth: 3_350_000_000_000,
        },
    }
}

/// Random DAG workloads whose llm nodes each name one of a few adapters (or
/// none), on random engines and clusters behind random routers (the
/// lora-affinity policy among them), some clients timing out: no step ever
/// computes for more than `max_loras` distinct adapters, every request
/// leaves, and the engine's per-adapter waiting counts stay those of its
/// queue (checked after every step).
#[test]
fn a_step_never_holds_more_than_max_loras_adapters() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0x10AA);
    let mut crowded = 0;
    for case in 0..300u64 {
        let engine = blis_sweep::sim::EngineConfig { lora: Some(lora(&mut rng)), ..random_engine(&mut rng) };
        let max_loras = engine.lora.unwrap().max_loras as usize;
        let replicas = if rng.random_bool(0.5) { 1 } else { rng.random_range(2..=4) };
        let latency = StepPricer::Linear(Linear::new(&[500.0, 1.0, 5.0]).unwrap());
        let pool = PoolConfig::mixed(engine, replicas, random_router(&mut rng), latency);
        let mut sim = Simulation::pools(vec![pool], KvTransferConfig::UNUSED, PdDecider::Always);
        sim.check_invariants(true);
        sim.set_step_trace(true);
        // Some clients give up: aborted requests leave the queues too.
        sim.set_request_timeout(rng.random_bool(0.3).then(|| rng.random_range(1_000..300_000)));
        let adapters = rng.random_range(1..=6);
        let mut of: HashMap<(RequestId, u32), Option<String>> = HashMap::new();
        let mut sink = Steps::default();
        let n = rng.random_range(1..=12u64);
        let mut arrival = 0.0;
        for id in 0..n {
            arrival += rng.random_range(0.0..0.05);
            let mut request = random_request(&mut rng, id, (arrival * 1e6f64).round() / 1e6);
            for (k, sub) in request.sub_requests.iter_mut().enumerate() {
                if let NodeKind::Llm(call) = &mut sub.kind {
                    call.lora = rng.random_bool(0.8).then(|| format!("a{}", rng.random_range(0..adapters)));
                    of.insert((request.request_id.clone(), k as u32), call.lora.clone());
                }
            }
            assert!(sim.add_request(request, &mut sink));
        }
        sim.finish(&mut sink);
        assert_eq!(sink.done.len() as u64, n, "case {case}: requests lost");
        for s in &sink.steps {
            let distinct: HashSet<&String> =
                s.scheduled.iter().filter_map(|(r, _)| of[&(r.request_id.clone(), r.node)].as_ref()).collect();
            assert!(distinct.len() <= max_loras, "case {case}: step {} holds {distinct:?}", s.index);
            crowded += usize::from(distinct.len() == max_loras && max_loras > 1);
        }
    }
    // The limit was reached, not merely never approached.
    assert!(crowded > 100, "{crowded}");
}

fn call(prompt: &[u32], lora: Option<&str>) -> Request {
    let call = LlmCall::for_prompt(prompt.to_vec(), 2).with_lora(lora.map(str::to_owned));
    Request {
        traffic: Default::default(),
        request_id: RequestId::Int(0),
        arrival_time: 0.0,
        initial: vec![0],
        sub_requests: vec![SubRequest { next: vec![], interval: 0.0, kind: NodeKind::Llm(call), result: None }],
    }
}

/// The same prompt again hits the prefix cache under the same adapter only:
/// vLLM's block hashes carry the adapter's name.
#[test]
fn prefixes_do_not_hit_across_adapters() {
    let prompt: Vec<u32> = (0..160).collect();
    let cached = |first: Option<&str>, second: Option<&str>| {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        let engine = blis_sweep::sim::EngineConfig {
            lora: Some(LoraConfig { max_loras: 2, max_cpu_loras: 2, ..lora(&mut rng) }),
            ..blis_sweep::sim::EngineConfig::new(8, 512, 1024, 16, 100)
        };
        let mut sim = Simulation::new(engine, StepPricer::Linear(Linear::new(&[500.0, 1.0, 5.0]).unwrap()));
        let mut done = Vec::new();
        assert!(sim.add_request(call(&prompt, first), &mut done));
        let mut again = call(&prompt, second);
        again.request_id = RequestId::Int(1);
        again.arrival_time = 1.0;
        assert!(sim.add_request(again, &mut done));
        sim.finish(&mut done);
        done[1].nodes[0].cached_tokens
    };
    // 159 tokens may hit (the last is always computed): 9 blocks of 16.
    assert_eq!(cached(Some("a"), Some("a")), 144);
    assert_eq!(cached(None, None), 144);
    assert_eq!(cached(Some("a"), Some("b")), 0);
    assert_eq!(cached(None, Some("a")), 0);
    assert_eq!(cached(Some("a"), None), 0);
}

const LORA_ENGINE: &str = "  lora: {max_loras: 1, max_lora_rank: 16, load_ms: 5}\n";

fn workload(adapters: &[(&str, f64)]) -> String {
    adapters
        .iter()
        .enumerate()
        .map(|(i, (a, t))| {
            format!(
                "{{\"request_id\": {i}, \"arrival_time\": {t}, \"initial\": [0], \"sub_requests\": [{{\"kind\": \"llm\", \
                 \"input_tokens\": 100, \"output_tokens\": 1, \"next\": [], \"lora\": \"{a}\"}}]}}\n"
            )
        })
        .collect()
}

/// A hand-computed load: the linear model prices a 100-token prefill at
/// 1000 + 2·100 = 1200 µs; the LoRA kernels of Llama-3.1-8B on H100 for 100
/// tokens are at their floor, 8 kernels × 2.7 µs × 32 layers = 691 µs; a
/// load (`load_ms: 5`) adds 5000 µs to the step that needs it. With one
/// slot, `a`, `a` again, then `b` are: load, resident, load.
#[test]
fn an_adapter_load_lengthens_the_step_that_needs_it() {
    let dir = Dir::new("lora-load");
    dir.create("s.yaml", &LINEAR_SCENARIO.replace("engine:\n", &format!("engine:\n{LORA_ENGINE}")));
    dir.create("w.jsonl", &workload(&[("a", 0.0), ("a", 1.0), ("b", 2.0)]));
    let out = TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "w.jsonl", "--metrics", "m.json"]).stdout();
    let rows = rows(&out);
    let ttft: Vec<u64> = rows.iter().map(|r| latencies_us(r, 0)[0]).collect();
    assert_eq!(ttft, vec![6891, 1891, 6891]);
    // Results echo the adapter; the metrics count the loads (the CPU cache
    // holds one adapter: `b` and `a` both came from disk).
    assert_eq!(rows[2]["sub_requests"][0]["lora"], "b");
    let m: serde_json::Value = serde_json::from_str(&dir.read("m.json")).unwrap();
    assert_eq!(m["lora_adapter_loads"], serde_json::json!({"from_cpu": 0, "from_disk": 2}));
    // Without engine.lora the metrics say nothing of adapters.
    dir.create("w0.jsonl", &workload(&[("a", 0.0)]).replace(", \"lora\": \"a\"", ""));
    dir.create("s0.yaml", LINEAR_SCENARIO);
    TestCommand::new(&dir.path, &["run", "-s", "s0.yaml", "w0.jsonl", "--metrics", "m0.json", "-o", "r.jsonl"])
        .stdout();
    assert!(!dir.read("m0.json").contains("lora"));
}

/// A TraceV2 `adapter` column becomes each call's adapter where the
/// engines serve LoRA (else it is ignored, as `defects_trace` checks).
#[test]
fn tracev2_adapters_are_served() {
    let dir = Dir::new("lora-tracev2");
    dir.create("s.yaml", &LINEAR_SCENARIO.replace("engine:\n", &format!("engine:\n{LORA_ENGINE}")));
    dir.create("t.yaml", "trace_version: 3\ntime_unit: microseconds\nmode: real\nwarm_up_requests: 0\n");
    dir.create(
        "t.csv",
        "request_id,input_tokens,output_tokens,arrival_time_us,adapter\n0,100,1,0,x\n1,100,1,1000000,\n2,100,1,2000000,y\n",
    );
    let out = TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "--input", "tracev2:t.yaml", "--metrics", "m.json"])
        .stdout();
    let rows = rows(&out);
    let loras: Vec<&serde_json::Value> = rows.iter().map(|r| &r["sub_requests"][0]["lora"]).collect();
    assert_eq!(loras, [&serde_json::json!("x"), &serde_json::Value::Null, &serde_json::json!("y")]);
    let m: serde_json::Value = serde_json::from_str(&dir.read("m.json")).unwrap();
    assert_eq!(m["lora_adapter_loads"]["from_disk"], 2, "{m}");
    assert!(m.get("trace_columns_not_modelled").is_none(), "{m}");
}

/// Bad `engine.lora` values and adapters an engine does not serve are
/// one-line errors naming the file, the line and the field.
#[test]
fn bad_lora_input_names_file_line_and_field() {
    let dir = Dir::new("lora-bad");
    let with = |lora: &str| LINEAR_SCENARIO.replace("engine:\n", &format!("engine:\n  lora: {lora}\n"));
    for (lora, expected) in [
        ("{max_loras: 0}", "s.yaml:5: engine.lora.max_loras: must be at least 1"),
        ("{max_lora_rank: 12}", "s.yaml:5: engine.lora.max_lora_rank: 12: vLLM accepts one of"),
        ("{max_loras: 4, max_cpu_loras: 2}", "s.yaml:5: engine.lora.max_cpu_loras: 2 is below max_loras = 4"),
        ("{load_ms: 5, cpu_bandwidth_gbps: 100}", "s.yaml:5: engine.lora.load_ms: give load_ms or the bandwidths"),
        ("{max_slots: 2}", "s.yaml:5"),
    ] {
        dir.create("s.yaml", &with(lora));
        dir.create("w.jsonl", &workload(&[("a", 0.0)]));
        let err = TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl"]).fails();
        assert!(err.starts_with(&format!("blis-sweep: {expected}")), "{lora}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(!dir.join("r.jsonl").exists());
    }
    // An adapter on an engine without engine.lora: refused before the run.
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", &workload(&[("a", 0.0), ("b", 1.0)]).replace(", \"lora\": \"a\"", ""));
    let err = TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl"]).fails();
    assert!(err.starts_with("blis-sweep: w.jsonl:2: sub_requests[0].lora: adapter `b`, but pool"), "{err}");
    assert!(!dir.join("r.jsonl").exists());
    // An empty name is no adapter: refused by the reader.
    dir.create("w.jsonl", &workload(&[("", 0.0)]));
    let err = TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl"]).fails();
    assert!(err.contains("w.jsonl:1: sub_requests[0].lora: an adapter name cannot be empty"), "{err}");
}
