//! Speculative decoding end to end (`engine.speculative`): tokens per step
//! at the acceptance extremes, in both scheduling modes, its cost when
//! nothing is accepted, seeded determinism, the lookahead KV slots, and bad
//! values refused by field.

use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, latencies_us, rows};

fn llm_row(id: u64, arrival: f64, input: u32, output: u32) -> String {
    format!(
        r#"{{"request_id": {id}, "arrival_time": {arrival}, "initial": [0], "sub_requests": [{{"kind": "llm", "input_tokens": {input}, "output_tokens": {output}, "next": []}}]}}"#
    )
}

/// The linear test scenario, synchronous, with `speculative` (a YAML flow
/// mapping) or none.
fn scenario(speculative: Option<&str>) -> String {
    let mut engine = "engine:\n  async_scheduling: false\n".to_owned();
    if let Some(s) = speculative {
        engine += &format!("  speculative: {s}\n");
    }
    LINEAR_SCENARIO.replace("engine:\n", &engine)
}

/// Runs `workload` through `scenario`: results, metrics, step trace.
fn run(name: &str, scenario: &str, workload: &str) -> (String, serde_json::Value, Vec<serde_json::Value>) {
    let dir = Dir::new(name);
    dir.create("s.yaml", scenario);
    dir.create("w.jsonl", workload);
    let args =
        ["run", "-q", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl", "--metrics", "m.json", "--step-trace", "t.jsonl"];
    TestCommand::new(&dir.path, &args).stdout();
    (dir.read("r.jsonl"), serde_json::from_str(&dir.read("m.json")).unwrap(), rows(&dir.read("t.jsonl")))
}

/// The linear test scenario with vLLM's default, async scheduling.
fn scenario_async(speculative: &str) -> String {
    LINEAR_SCENARIO.replace("engine:\n", &format!("engine:\n  speculative: {speculative}\n"))
}

fn tokens_per_step(steps: &[serde_json::Value]) -> Vec<u64> {
    steps.iter().map(|s| s["scheduled"][0]["tokens"].as_u64().unwrap()).collect()
}

/// α = 1, K = 3: after the prefill, every step verifies 1 + 3 tokens and
/// emits 4, delivered together: 40 outputs after the first in 10 steps, 10
/// inter-token gaps (one per engine output), TPOT over 40 tokens.
#[test]
fn alpha_one_emits_k_plus_one_tokens_a_step() {
    let (_, m, steps) =
        run("spec-a1", &scenario(Some("{method: eagle, k: 3, rate: 1.0}")), &format!("{}\n", llm_row(0, 0.0, 40, 41)));
    assert_eq!(tokens_per_step(&steps), [vec![40], vec![4; 10]].concat());
    assert_eq!(m["engine_steps"], 11);
    let decode_us = steps[1]["duration_us"].as_u64().unwrap();
    // Linear: 1000 + 10 µs × 4 verified tokens, plus the EAGLE head's three
    // passes (about 1.6 ms on an H100, see src/latency/speculative.rs).
    assert!(decode_us > 1040 + 1500 && decode_us < 1040 + 1800, "{decode_us}");
    let itl = m["itl_mean_ms"].as_f64().unwrap();
    assert!((itl - decode_us as f64 / 1e3).abs() < 1e-9, "{itl}");
    let tpot = m["tpot_mean_ms"].as_f64().unwrap();
    assert!((tpot - 10.0 * decode_us as f64 / 40.0 / 1e3).abs() < 1e-3, "{tpot}");
    let s = &m["spec_decode"];
    assert_eq!((s["num_drafts"].as_u64(), s["num_draft_tokens"].as_u64()), (Some(10), Some(30)));
    assert_eq!(s["num_accepted_tokens_per_pos"], serde_json::json!([10, 10, 10]));
    assert_eq!(s["mean_acceptance_length"], 4.0);
}

/// α = 0: one token a step, each step wider and drafting, so the request
/// takes longer than without speculation; off, no `spec_decode` block.
#[test]
fn alpha_zero_emits_one_and_costs_more_than_none() {
    let workload = format!("{}\n", llm_row(0, 0.0, 40, 41));
    let (_, m, steps) = run("spec-a0", &scenario(Some("{method: eagle, k: 3, rate: 0.0}")), &workload);
    let (_, off, off_steps) = run("spec-off", &scenario(None), &workload);
    assert_eq!(tokens_per_step(&steps), [vec![40], vec![4; 40]].concat());
    assert_eq!(tokens_per_step(&off_steps), [vec![40], vec![1; 40]].concat());
    assert_eq!(m["spec_decode"]["num_accepted_tokens"], 0);
    assert!(off.get("spec_decode").is_none());
    let e2e = |m: &serde_json::Value| m["e2e_mean_ms"].as_f64().unwrap();
    assert!(e2e(&m) > e2e(&off) * 1.5, "{} vs {}", e2e(&m), e2e(&off));
    // ngram drafts cost no GPU time: only the wider verify (3 × 10 µs).
    let (_, ngram, _) = run("spec-ng0", &scenario(Some("{method: ngram, k: 3, rate: 0.0}")), &workload);
    assert!((e2e(&ngram) - e2e(&off) - 40.0 * 0.030).abs() < 1e-9, "{} vs {}", e2e(&ngram), e2e(&off));
}

/// Async scheduling, α = 1, K = 3: each decode is scheduled while the one
/// before executes, counting its 3 drafts as accepted, so every step still
/// verifies 1 + 3. The step scheduled while the 10th decode executes is not
/// sure to be needed (4 tokens short of 81 only if all drafts were
/// rejected), so it runs and its output is dropped (vLLM's
/// `spec_full` async trace): 11 decodes, the last token at the 10th's end.
/// With α = 0 a step is skipped once the one in flight surely finishes the
/// request: exactly 40 decodes, none wasted.
#[test]
fn async_scheduling_counts_the_drafts_in_flight_as_accepted() {
    let workload = format!("{}\n", llm_row(0, 0.0, 40, 41));
    let (r, m, steps) = run("spec-async1", &scenario_async("{method: eagle, k: 3, rate: 1.0}"), &workload);
    assert_eq!(tokens_per_step(&steps), [vec![40], vec![4; 11]].concat());
    assert_eq!(m["engine_steps"], 12);
    // The dropped output is not counted: vLLM skips a finished request's.
    assert_eq!(m["spec_decode"]["num_drafts"], 10);
    let end = |i: usize| steps[i]["start_us"].as_u64().unwrap() + steps[i]["duration_us"].as_u64().unwrap();
    // Arrival at 0: the token latencies add up to the last token's time.
    let lat = latencies_us(&rows(&r)[0], 0);
    assert_eq!(lat.len(), 41);
    assert!(lat.iter().sum::<u64>().abs_diff(end(10)) <= 41, "the last token comes with the 10th decode: {lat:?}");
    let (_, m0, steps0) = run("spec-async0", &scenario_async("{method: eagle, k: 3, rate: 0.0}"), &workload);
    assert_eq!(tokens_per_step(&steps0), [vec![40], vec![4; 40]].concat());
    assert_eq!(m0["spec_decode"]["num_accepted_tokens"], 0);
}

/// Same seed ⇒ byte-identical results and metrics; another seed ⇒ other
/// acceptances.
#[test]
fn the_seed_decides_the_acceptances() {
    let workload: String = (0..12).map(|i| llm_row(i, 0.01 * i as f64, 50 + 7 * i as u32, 60) + "\n").collect();
    let with =
        |seed: u64| scenario(Some(&format!("{{method: eagle, k: 4, acceptance: [0.8, 0.6, 0.4, 0.2], seed: {seed}}}")));
    let (r1, m1, _) = run("spec-s1", &with(1), &workload);
    let (r1b, m1b, _) = run("spec-s1b", &with(1), &workload);
    let (_, m2, _) = run("spec-s2", &with(2), &workload);
    assert_eq!((r1, &m1), (r1b, &m1b));
    assert_ne!(m1["spec_decode"], m2["spec_decode"]);
    // The rates hold roughly: position 1 accepted ~80 % of verifications.
    let s = &m1["spec_decode"];
    let first = s["num_accepted_tokens_per_pos"][0].as_f64().unwrap() / s["num_drafts"].as_f64().unwrap();
    assert!((0.7..0.9).contains(&first), "{first}");
}

/// EAGLE reserves k lookahead KV slots beyond the scheduled tokens; n-gram
/// does not. A 44-token prompt fills 3 blocks of 16; its first verify
/// computes 44 + 4 = 48 tokens (3 blocks), plus 3 lookahead slots: 4.
#[test]
fn lookahead_slots_take_kv_blocks() {
    let workload = format!("{}\n", llm_row(0, 0.0, 44, 20));
    let blocks = |method: &str| {
        let (_, _, steps) = run(
            &format!("spec-la-{method}"),
            &scenario(Some(&format!("{{method: {method}, k: 3, rate: 0.0}}"))),
            &workload,
        );
        (steps[0]["kv_blocks_used"].as_u64().unwrap(), steps[1]["kv_blocks_used"].as_u64().unwrap())
    };
    assert_eq!(blocks("eagle"), (3, 4));
    assert_eq!(blocks("ngram"), (3, 3));
}

/// Bad values: one line naming the file, line and field; exit 2; nothing
/// written.
#[test]
fn bad_speculative_values_are_refused_by_field() {
    let dir = Dir::new("spec-bad");
    dir.create("w.jsonl", &format!("{}\n", llm_row(0, 0.0, 40, 4)));
    let cases = [
        (scenario(Some("{method: eagle, k: 0, rate: 0.5}")), "engine.speculative.k: 0 must be in 1..=32"),
        (scenario(Some("{method: medusa, k: 2, rate: 0.5}")), "engine.speculative.method: unknown method `medusa`"),
        (scenario(Some("{method: eagle, k: 2, acceptance: [0.5, 0.9]}")), "engine.speculative.acceptance: α2 = 0.9"),
        (scenario(Some("{method: eagle, k: 2, rate: 2}")), "engine.speculative.rate: 2 must be in [0, 1]"),
        (scenario(Some("{method: eagle, k: 2, rate: 0.5, bogus: 1}")), "bogus"),
        (
            LINEAR_SCENARIO.replace("engine:\n", "engine:\n  speculative: {method: ngram, k: 2, rate: 0.5}\n"),
            "engine.async_scheduling: vLLM schedules ngram drafts synchronously only",
        ),
    ];
    for (yaml, want) in cases {
        dir.create("s.yaml", &yaml);
        let err = TestCommand::new(&dir.path, &["run", "-q", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl"]).fails();
        assert!(err.starts_with("blis-sweep: ") && err.contains("s.yaml:") && err.contains(want), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert_eq!(dir.files(), ["s.yaml", "w.jsonl"]);
    }
}

/// Random DAG workloads on random engines with random speculative decoding
/// (async scheduling for half the EAGLE and MTP engines), through the library with the KV-cache invariant
/// checked after every step: every completed llm node emits exactly its
/// tokens, at most k + 1 at one time, in time order, finishing with its
/// last; the counters agree with themselves.
#[test]
fn random_workloads_with_drafts_keep_the_engine_consistent() {
    use crate::properties::{feed, random_client, random_engine, random_latency};
    use blis_sweep::latency::DraftCost;
    use blis_sweep::sim::{
        EngineConfig, KvTransferConfig, PdDecider, PoolConfig, RequestStatus, Simulation, SpecDecode, SpecMethod,
    };
    use blis_sweep::workload::NodeKind;
    use rand::{RngExt, SeedableRng};
    use rand_xoshiro::Xoshiro256PlusPlus;

    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0x5bec);
    let (mut completed, mut drafts, mut async_cases) = (0, 0, 0);
    for case in 0..300u64 {
        let k = rng.random_range(1..=4u32);
        let method = [SpecMethod::Eagle, SpecMethod::Ngram, SpecMethod::Mtp][rng.random_range(0..3)];
        let mut alpha = 1_000_000u32;
        let acceptance: Vec<u32> = (0..k)
            .map(|_| {
                alpha = rng.random_range(0..=alpha);
                alpha
            })
            .collect();
        let spec = SpecDecode::new(method, k, acceptance, rng.random(), DraftCost::FREE);
        let async_scheduling = method != SpecMethod::Ngram && rng.random_bool(0.5);
        async_cases += u32::from(async_scheduling);
        let engine = EngineConfig { async_scheduling, speculative: Some(spec), ..random_engine(&mut rng) };
        let replicas = rng.random_range(1..=3);
        let router = crate::properties::random_router(&mut rng);
        let pool = PoolConfig::mixed(engine, replicas, router, random_latency(&mut rng));
        let mut sim = Simulation::pools(vec![pool], KvTransferConfig::UNUSED, PdDecider::Always);
        sim.check_invariants(true);
        sim.set_client(random_client(&mut rng));
        let done = feed(&mut sim, &mut rng, case, None);
        for r in done.iter().filter(|r| r.status == RequestStatus::Completed) {
            completed += 1;
            for (sub, node) in r.request.sub_requests.iter().zip(&r.nodes) {
                let NodeKind::Llm(call) = &sub.kind else { continue };
                let times = &node.token_times_us;
                assert_eq!(times.len() as u32, call.tokens_to_emit(), "case {case}: wrong token count");
                assert!(times.windows(2).all(|w| w[0] <= w[1]), "case {case}: out of order");
                let most_at_once = times.chunk_by(|a, b| a == b).map(<[u64]>::len).max().unwrap_or(0);
                assert!(most_at_once <= k as usize + 1, "case {case}: {most_at_once} tokens at once, k = {k}");
                if let Some(&last) = times.last() {
                    assert_eq!(Some(last), node.finish_us, "case {case}");
                }
            }
        }
        let s = sim.engine_stats().spec;
        drafts += s.drafts;
        assert!(s.accepted_tokens <= s.draft_tokens && s.draft_tokens <= s.drafts * u64::from(k), "case {case}");
        let per_pos = s.accepted_per_pos();
        assert_eq!(per_pos.len(), k as usize, "case {case}");
        assert_eq!(per_pos.iter().sum::<u64>(), s.accepted_tokens, "case {case}");
        assert!(per_pos.windows(2).all(|w| w[0] >= w[1]), "case {case}: {per_pos:?}");
        assert_eq!(s.by_accepted.iter().sum::<u64>(), s.drafts, "case {case}");
    }
    assert!(
        completed > 300 && drafts > 1000 && async_cases > 60,
        "coverage: {completed} completed, {drafts} verifications, {async_cases} async engines"
    );
}
