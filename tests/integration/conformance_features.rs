//! The speculative decoding, LoRA and priority-scheduling golden traces of vLLM's own scheduler
//! (`tests/data/vllm-conformance/features/`, recorded by
//! `scripts/vllm-conformance/record.sh`; format and semantics in that
//! folder's README, section "Features"), checked on their own: the recorder's
//! fake runner accepted exactly what the shared acceptance function says, vLLM
//! delivered every request's `max_tokens` and never batched more than
//! `max_loras` adapters, and the priority traces follow vLLM's queue order
//! and victim rule; then the simulator replays every trace and must agree
//! with it step for step.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The feature golden files recorded.
const GOLDEN: [&str; 6] = ["0.15.1-sync", "0.15.1-async", "0.19.0-sync", "0.19.0-async", "0.33.0-sync", "0.33.0-async"];

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/vllm-conformance/features")
}

/// SplitMix64's finaliser: the acceptance function's mixer (`hash::mix` in
/// the simulator; `cases.py`'s `splitmix64` on the Python side).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// u_j in [0, 1): 53 bits of the mixed (seed, key, pos, j).
fn uniform(seed: u64, key: u64, pos: u64, j: u64) -> f64 {
    (mix(mix(mix(seed ^ key) ^ pos) ^ j) >> 11) as f64 / (1u64 << 53) as f64
}

/// p_j, j = 1..=k: `rate` r gives r exactly; a list α gives α_j / α_{j-1}
/// (α_0 = 1, and 0 after an α of 0), as `cases.py`'s `acceptance_probs`.
fn probs(spec: &Value) -> Vec<f64> {
    let k = spec["k"].as_u64().unwrap() as usize;
    if let Some(r) = spec["rate"].as_f64() {
        return vec![r; k];
    }
    let mut alphas = vec![1.0];
    alphas.extend(spec["acceptance"].as_array().unwrap().iter().map(|a| a.as_f64().unwrap()));
    assert_eq!(alphas.len(), k + 1);
    (1..=k).map(|j| if alphas[j - 1] > 0.0 { alphas[j] / alphas[j - 1] } else { 0.0 }).collect()
}

fn accepted(spec: &Value, key: u64, pos: u64, drafts: u64) -> u64 {
    let p = probs(spec);
    let seed = spec["seed"].as_u64().unwrap_or(0);
    let mut a = 0;
    while a < drafts && uniform(seed, key, pos, a + 1) < p[a as usize] {
        a += 1;
    }
    a
}

/// `python3 scripts/vllm-conformance/cases.py --vectors`, bit for bit.
#[test]
fn acceptance_function_matches_the_recorders_vectors() {
    assert_eq!(mix(0), 0xe220_a839_7b1d_cdaf);
    assert_eq!(mix(1), 0x910a_2dec_8902_5cc1);
    assert_eq!(mix(7), 0x63cb_e1e4_5932_0dd7);
    let cases: [(u64, u64, u64, [f64; 3]); 3] = [
        (0, 0, 1, [0.1345321208590312, 0.10317913945866874, 0.6161521645440659]),
        (5, 3, 2, [0.8685675603855549, 0.06729083054173379, 0.13570861274094503]),
        (0xDEAD_BEEF, 0, 40, [0.5026083244841082, 0.07952464460454678, 0.5133218107225946]),
    ];
    for (seed, r, pos, want) in cases {
        for (j, u) in want.iter().enumerate() {
            assert_eq!(uniform(seed, mix(r), pos, j as u64 + 1).to_bits(), u.to_bits(), "{seed} {r} {pos} {j}");
        }
    }
    let rate: Value = serde_json::json!({"method": "eagle", "k": 3, "rate": 0.7, "seed": 0});
    let list: Value = serde_json::json!({"method": "eagle", "k": 2, "acceptance": [0.8, 0.5], "seed": 5});
    let grid = |spec: &Value| -> Vec<Vec<u64>> {
        let k = spec["k"].as_u64().unwrap();
        (0..6).map(|r| (1..=6).map(|pos| accepted(spec, mix(r), pos, k)).collect()).collect()
    };
    assert_eq!(
        grid(&rate),
        [
            [3, 0, 0, 3, 1, 3],
            [1, 2, 3, 0, 0, 3],
            [1, 1, 2, 1, 1, 3],
            [2, 0, 0, 0, 2, 0],
            [1, 3, 3, 0, 3, 2],
            [0, 3, 0, 3, 3, 1]
        ]
    );
    assert_eq!(
        grid(&list),
        [
            [2, 2, 1, 1, 2, 1],
            [2, 1, 2, 2, 2, 0],
            [1, 1, 1, 2, 2, 2],
            [2, 0, 2, 2, 2, 0],
            [2, 1, 0, 2, 1, 2],
            [1, 0, 1, 0, 0, 2]
        ]
    );
}

fn cases() -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(data_dir().join("cases")).unwrap() {
        let case: Value = serde_json::from_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap()).unwrap();
        out.insert(case["name"].as_str().unwrap().to_owned(), case);
    }
    out
}

/// What one recorded run must satisfy; the first violation, or `None`.
fn check(case: &Value, golden: &Value) -> Option<String> {
    let requests = case["requests"].as_array().unwrap();
    let spec = case.get("speculative");
    let k = spec.map_or(0, |s| s["k"].as_u64().unwrap());
    let max_loras = case["lora"]["max_loras"].as_u64();
    for row in golden["steps"].as_array().unwrap() {
        let row = row.as_array().unwrap();
        if row.len() != 6 {
            return Some(format!("a row without the per-request column: {row:?}"));
        }
        let scheduled: Vec<u64> = row[1].as_array().unwrap().iter().map(|p| p[0].as_u64().unwrap()).collect();
        let samples = row[5].as_array().unwrap();
        let order: Vec<u64> = samples.iter().map(|s| s[0].as_u64().unwrap()).collect();
        if order != scheduled {
            return Some(format!("t={}: per-request column out of order", row[0]));
        }
        for (s, n) in samples.iter().zip(row[1].as_array().unwrap()) {
            let [r, drafts, sampled, pos] = [0, 1, 2, 3].map(|i| s[i].as_u64().unwrap());
            if drafts > k || drafts + 1 > n[1].as_u64().unwrap() {
                return Some(format!("t={}: request {r}: {drafts} drafts in {n}", row[0]));
            }
            if drafts > 0 {
                let want = 1 + accepted(spec.unwrap(), mix(r), pos, drafts);
                if sampled != want {
                    return Some(format!("t={}: request {r} pos {pos}: sampled {sampled}, function {want}", row[0]));
                }
            }
        }
        if let Some(max) = max_loras {
            let adapters: BTreeSet<&str> =
                scheduled.iter().filter_map(|&r| requests[r as usize]["lora"].as_str()).collect();
            if adapters.len() as u64 > max {
                return Some(format!("t={}: {} adapters in one batch: {adapters:?}", row[0], adapters.len()));
            }
        }
    }
    for (r, (req, tokens)) in requests.iter().zip(golden["tokens"].as_array().unwrap()).enumerate() {
        let (want, got) = (req["output_len"].as_u64().unwrap(), tokens.as_array().unwrap().len() as u64);
        if got != want {
            return Some(format!("request {r}: {got} tokens delivered, max_tokens {want}"));
        }
    }
    None
}

#[test]
fn feature_traces_follow_the_acceptance_function_and_max_loras() {
    let cases = cases();
    let mut failures = Vec::new();
    let mut drafted_steps = 0;
    for name in GOLDEN {
        let text = std::fs::read_to_string(data_dir().join(format!("golden/{name}.jsonl"))).unwrap();
        let mut seen = BTreeSet::new();
        for line in text.lines() {
            let golden: Value = serde_json::from_str(line).unwrap();
            let case_name = golden["case"].as_str().unwrap();
            assert_eq!(golden["vllm"].as_str().unwrap(), name.split_once('-').unwrap().0);
            if let Some(why) = check(&cases[case_name], &golden) {
                failures.push(format!("{name} {case_name}: {why}"));
            }
            drafted_steps += golden["steps"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|row| row[5].as_array().unwrap())
                .filter(|s| s[1].as_u64().unwrap() > 0)
                .count();
            seen.insert(case_name.to_owned());
        }
        // Every case is recorded, except n-gram with async scheduling, which vLLM refuses.
        let missing: Vec<&String> = cases.keys().filter(|c| !seen.contains(*c)).collect();
        let want: Vec<&String> = if name.ends_with("async") {
            cases.iter().filter(|(_, c)| c["speculative"]["method"] == "ngram").map(|(n, _)| n).collect()
        } else {
            vec![]
        };
        assert_eq!(missing, want, "{name}: cases not recorded");
    }
    assert!(drafted_steps >= 300, "only {drafted_steps} request-steps verify drafts");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A priority case's order key: vLLM's `Request.__lt__` compares (priority,
/// arrival time, request id as a string); ids stay below 10 in these cases
/// (`cases.py`), so the index orders them as the string does.
fn priority_key(case: &Value, r: u64) -> (i64, u64, u64) {
    let req = &case["requests"][r as usize];
    (req["priority"].as_i64().unwrap_or(0), req["arrival_step"].as_u64().unwrap(), r)
}

/// The queue order and the victim rule of vLLM's priority policy, read off
/// the priority traces alone: every preemption victim ranks at or after every
/// request scheduled in its step (vLLM takes `max(running, key=(priority,
/// arrival))`, and all of those were running when it chose); a step admits in
/// (priority, arrival, id) order and leaves no request that had arrived
/// before it waiting with a key below one it admitted.
#[test]
fn priority_traces_follow_the_queue_order_and_the_victim_rule() {
    let cases = cases();
    let mut checked = 0;
    let mut victims = 0;
    for name in GOLDEN {
        let text = std::fs::read_to_string(data_dir().join(format!("golden/{name}.jsonl"))).unwrap();
        for line in text.lines() {
            let golden: Value = serde_json::from_str(line).unwrap();
            let case = &cases[golden["case"].as_str().unwrap()];
            if case["engine"]["scheduling_policy"] != "priority" {
                continue;
            }
            checked += 1;
            let key = |r: u64| priority_key(case, r);
            let mut running = BTreeSet::new();
            for row in golden["steps"].as_array().unwrap() {
                let t = row[0].as_u64().unwrap();
                let ids =
                    |v: &Value| -> Vec<u64> { v.as_array().unwrap().iter().map(|p| p[0].as_u64().unwrap()).collect() };
                let scheduled = ids(&row[1]);
                let admitted = ids(&row[2]);
                let preempted: Vec<u64> = row[3].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
                for &v in &preempted {
                    victims += 1;
                    // the victim's key has no request id: (priority, arrival) only
                    let rank = |r: u64| (key(r).0, key(r).1);
                    for &s in &scheduled {
                        assert!(
                            rank(v) >= rank(s),
                            "{name} {} t={t}: victim {v} ranks before scheduled {s}",
                            case["name"]
                        );
                    }
                    running.remove(&v);
                }
                assert!(
                    admitted.windows(2).all(|w| key(w[0]) < key(w[1])),
                    "{name} {} t={t}: admitted out of order {admitted:?}",
                    case["name"]
                );
                if let Some(&last) = admitted.last() {
                    for (r, req) in case["requests"].as_array().unwrap().iter().enumerate() {
                        let r = r as u64;
                        let waiting = req["arrival_step"].as_u64().unwrap() < t
                            && !running.contains(&r)
                            && !admitted.contains(&r);
                        // (a finished request was admitted, so it is in `running`)
                        assert!(
                            !waiting || key(r) > key(last),
                            "{name} {} t={t}: {r} left waiting behind {last}",
                            case["name"]
                        );
                    }
                }
                running.extend(admitted);
            }
        }
    }
    // 4 priority cases × 3 releases × 2 modes.
    assert_eq!(checked, 24, "priority traces checked");
    assert!(victims >= 24, "only {victims} priority preemptions recorded");
}

/// Traces the simulator does not match yet, each named with where. None
/// now (the last two, the async `prio_c` of 0.15.1 and 0.19.0, were fixed by
/// not scheduling again at once after a self-preemption while a step is in
/// flight: `engine/priority.rs` `schedule_again`). Listed so that every other
/// trace must agree and these must still differ until fixed.
const KNOWN_DIVERGENT: [(&str, &str); 0] = [];

/// The simulator against every feature trace it models, step for step (the
/// comparison of `conformance.rs`: tokens scheduled per request — 1 + the
/// drafts verified —, admissions with their prefix hit, preemptions, KV
/// blocks in use, and the step of every token delivered), in both
/// scheduling modes.
#[test]
fn the_simulator_agrees_with_vllm_on_every_feature_trace_it_models() {
    let cases = cases();
    let mut failures = Vec::new();
    let mut compared = 0;
    for name in GOLDEN {
        let (version, mode) = name.split_once('-').unwrap();
        let text = std::fs::read_to_string(data_dir().join(format!("golden/{name}.jsonl"))).unwrap();
        for line in text.lines() {
            let golden: Value = serde_json::from_str(line).unwrap();
            let case = &cases[golden["case"].as_str().unwrap()];
            let diverges = super::conformance::compare(case, &golden, version, mode == "async");
            let known = KNOWN_DIVERGENT.contains(&(name, golden["case"].as_str().unwrap()));
            match (diverges, known) {
                (Some(why), false) => failures.push(format!("{name} {}: {why}", golden["case"])),
                (None, true) => {
                    failures.push(format!("{name} {}: agrees now: drop it from KNOWN_DIVERGENT", golden["case"]))
                }
                _ => {}
            }
            compared += 1;
        }
    }
    // 10 cases (6 speculative/LoRA, 4 priority) × 3 releases × 2 modes, less
    // n-gram in async mode (vLLM refuses it).
    assert_eq!(compared, 57, "feature traces compared");
    assert!(failures.is_empty(), "{} of {compared} feature traces diverge:\n{}", failures.len(), failures.join("\n"));
}
