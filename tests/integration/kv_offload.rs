//! KV offload to a CPU tier (`engine.kv_offload`), end to end: a prefix
//! evicted from HBM is loaded back from the CPU tier, delaying its request
//! by exactly its bytes over the host link; the tier's LRU bound; the two
//! store policies; and bad keys refused with their field.
//!
//! The workload, built here: A (64 tokens, ids 1..=64) at 0 s; C (160
//! unrelated tokens) at 0.1 s, which on an 11-block GPU (10 usable) takes
//! every block, evicting A's four; B (A's 64 tokens + 16 more) at 0.2 s.
//! Each asks for one output token. The linear model prices a step at
//! 1000 + 2·prefill µs.

use crate::util::{Dir, TestCommand, rows};

fn request(id: u32, at: f64, ids: &[u32]) -> String {
    let sub = serde_json::json!({"kind": "llm", "input_tokens": ids.len(), "output_tokens": 1, "next": [],
        "interval": 0.0, "input_token_ids": ids});
    serde_json::json!({"request_id": id, "arrival_time": at, "initial": [0], "sub_requests": [sub]}).to_string() + "\n"
}

fn workload() -> String {
    let a: Vec<u32> = (1..=64).collect();
    let c: Vec<u32> = (1000..1160).collect();
    let b: Vec<u32> = a.iter().copied().chain(500..516).collect();
    [request(0, 0.0, &a), request(1, 0.1, &c), request(2, 0.2, &b)].concat()
}

fn scenario(num_gpu_blocks: u32, offload: &str) -> String {
    format!(
        "name: offload\nmodel: Llama-3.1-8B\nhardware: H100\nengine:\n  max_num_seqs: 16\n  max_num_batched_tokens: 4096\n  \
         block_size: 16\n  max_model_len: 1024\n  num_gpu_blocks: {num_gpu_blocks}\n{offload}\
         latency_model: {{kind: linear, beta: [1000, 2, 10]}}\n"
    )
}

/// Runs `scenario` on the workload: B's first-token latency (µs) and the
/// metrics JSON.
fn run(dir: &Dir, name: &str, scenario: &str) -> (u64, serde_json::Value) {
    dir.create(&format!("{name}.yaml"), scenario);
    let (out, metrics) = (format!("{name}.jsonl"), format!("{name}.json"));
    TestCommand::new(
        &dir.path,
        &["run", "-q", "-s", &format!("{name}.yaml"), "w.jsonl", "-o", &out, "--metrics", &metrics],
    )
    .stdout();
    let rows = rows(&dir.read(&out));
    let ttft = rows[2]["sub_requests"][0]["token_latency"][0].as_f64().unwrap();
    ((ttft * 1e6).round() as u64, serde_json::from_str(&dir.read(&metrics)).unwrap())
}

const ALL: &str = "  kv_offload: {cpu_gib: 1, bandwidth_gbps: 400, policy: all}\n";
const EVICTED: &str = "  kv_offload: {cpu_gib: 1, bandwidth_gbps: 400, policy: evicted}\n";

#[test]
fn an_evicted_prefix_is_loaded_from_the_cpu_tier_for_its_bytes_over_the_link() {
    let dir = Dir::new("offload-delay");
    dir.create("w.jsonl", &workload());
    // A big GPU keeps A's blocks: B hits 64 tokens on the GPU and computes
    // 16: 1000 + 2 × 16 = 1032 µs.
    let (gpu, m) = run(&dir, "gpu", &scenario(1000, ""));
    assert_eq!(gpu, 1032);
    assert!(m.get("kv_offload").is_none(), "no CPU tier, no kv_offload metrics");
    // 11 blocks: C evicted A's blocks; without a CPU tier B computes all
    // 80 tokens: 1000 + 2 × 80 = 1160 µs.
    let (none, _) = run(&dir, "none", &scenario(11, ""));
    assert_eq!(none, 1160);
    // With one, B loads A's 4 blocks: Llama-3.1-8B's KV is 32 layers × 8
    // heads × 128 dims × 2 (K, V) × 2 bytes = 131,072 bytes a token, 2 MiB a
    // 16-token block; 4 blocks = 8,388,608 bytes at 400 Gbit/s (5 × 10^10
    // bytes/s) = 167.77 µs, rounded up to 168. Then the same 16-token step.
    let (cpu, m) = run(&dir, "cpu", &scenario(11, ALL));
    assert_eq!(cpu, gpu + 168);
    let o = &m["kv_offload"];
    assert_eq!(o["cpu_hit_tokens"], 64);
    assert_eq!(o["gpu_hit_tokens"], 0);
    assert_eq!(o["cpu_loads"], 1);
    assert_eq!(o["cpu_load_bytes"], 8_388_608);
    // 64 + 160 + 80 tokens looked up; 64 of them hit, all in the CPU tier.
    assert_eq!(o["prefix_query_tokens"], 304);
    assert_eq!(o["hit_rate"], 64.0 / 304.0);
    assert_eq!(m["kv_cache_hit_rate"], 0.0);
}

#[test]
fn policy_all_stores_every_computed_block_and_evicted_only_what_hbm_evicts() {
    let dir = Dir::new("offload-policy");
    dir.create("w.jsonl", &workload());
    let (all, m_all) = run(&dir, "all", &scenario(11, ALL));
    let (evicted, m_ev) = run(&dir, "evicted", &scenario(11, EVICTED));
    // Both find A's blocks: `all` stored them when computed, `evicted` when
    // C's allocation evicted them.
    assert_eq!(all, evicted);
    assert_eq!(m_all["kv_offload"]["cpu_hit_tokens"], 64);
    assert_eq!(m_ev["kv_offload"]["cpu_hit_tokens"], 64);
    // `all`: A's 4 full blocks, C's 10, B's fifth (its first 4 were loaded).
    assert_eq!(m_all["kv_offload"]["cpu_stored_blocks"], 15);
    // `evicted`: A's 4, evicted by C, and the 5 of C's that B's blocks
    // evicted; nothing else left HBM.
    assert_eq!(m_ev["kv_offload"]["cpu_stored_blocks"], 9);
    // A big GPU evicts nothing: `evicted` stores nothing, `all` still
    // stores everything computed, and B hits on the GPU either way.
    let (_, m) = run(&dir, "big-evicted", &scenario(1000, EVICTED));
    assert_eq!(m["kv_offload"]["cpu_stored_blocks"], 0);
    let (_, m) = run(&dir, "big-all", &scenario(1000, ALL));
    assert_eq!(m["kv_offload"]["cpu_stored_blocks"], 4 + 10 + 1);
    assert_eq!(m["kv_offload"]["cpu_hit_tokens"], 0);
    assert_eq!(m["kv_offload"]["gpu_hit_tokens"], 64);
}

#[test]
fn a_cpu_tier_of_three_blocks_keeps_only_the_last_three_stored() {
    let dir = Dir::new("offload-lru");
    dir.create("w.jsonl", &workload());
    // 3 blocks of 2 MiB = 6 MiB = 0.005859375 GiB: by B's arrival the tier
    // holds C's last three blocks, not A's, and B computes everything.
    let tiny = "  kv_offload: {cpu_gib: 0.005859375, policy: all}\n";
    let (ttft, m) = run(&dir, "tiny", &scenario(11, tiny));
    assert_eq!(m["kv_offload"]["cpu_tier_blocks"], 3);
    assert_eq!(m["kv_offload"]["cpu_hit_tokens"], 0);
    assert_eq!(ttft, 1160);
}

#[test]
fn blocks_the_cpu_tier_evicts_are_read_back_from_disk_at_its_bandwidth() {
    let dir = Dir::new("offload-disk");
    dir.create("w.jsonl", &workload());
    // The 3-block CPU tier above, with 0.5 GiB of disk at 56 Gbit/s (7 GB/s)
    // below it: A's blocks spill to disk as C's fill the CPU tier, and B
    // reads all 4 from disk: 8,388,608 bytes at 7 × 10^9 bytes/s = 1198.37 µs
    // → 1199, then over PCIe (168 µs, as from the CPU tier), then its
    // 16-token step (1032 µs).
    let disk = "  kv_offload: {cpu_gib: 0.005859375, disk_gib: 0.5, disk_bandwidth_gbps: 56}\n";
    let (ttft, m) = run(&dir, "disk", &scenario(11, disk));
    assert_eq!(ttft, 1032 + 168 + 1199);
    assert_eq!(m["kv_offload"]["cpu_hit_tokens"], 64);
    assert_eq!(m["kv_offload"]["disk_hit_tokens"], 64);
    // Without the disk's bandwidth the key is refused.
    dir.create("bad.yaml", &scenario(11, "  kv_offload: {cpu_gib: 1, disk_gib: 4}\n"));
    let err = TestCommand::new(&dir.path, &["run", "-q", "-s", "bad.yaml", "w.jsonl", "-o", "r.jsonl"]).fails();
    assert!(err.starts_with("blis-sweep: bad.yaml:10: engine.kv_offload.disk_bandwidth_gbps: is required"), "{err}");
}

#[test]
fn bad_kv_offload_keys_are_refused_with_their_field() {
    let dir = Dir::new("offload-bad");
    dir.create("w.jsonl", &workload());
    let cases = [
        ("  kv_offload: {cpu_gib: 1, ssd: 4}\n", "bad.yaml:10: engine.kv_offload.ssd: unknown field"),
        ("  kv_offload: {cpu_gib: 1, policy: lru}\n", "bad.yaml:10: engine.kv_offload.policy: `lru` is not a policy"),
        ("  kv_offload: {cpu_gib: 0}\n", "bad.yaml:10: engine.kv_offload.cpu_gib: 0 must be a positive"),
        ("  kv_offload: {policy: all}\n", "bad.yaml:10: engine.kv_offload.cpu_gib: is required"),
        ("  kv_offload: {cpu_gib: 1, bandwidth_gbps: -5}\n", "bad.yaml:10: engine.kv_offload.bandwidth_gbps: -5"),
    ];
    for (offload, want) in cases {
        dir.create("bad.yaml", &scenario(11, offload));
        let err = TestCommand::new(&dir.path, &["run", "-q", "-s", "bad.yaml", "w.jsonl", "-o", "r.jsonl"]).fails();
        assert!(err.starts_with(&format!("blis-sweep: {want}")), "{offload}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!dir.join("r.jsonl").exists());
    }
}

/// Random DAG workloads on random engines with a random CPU tier (1–200
/// blocks, either policy, any link), one replica or a cluster: the KV
/// invariant holds after every step, every request leaves, every completed
/// llm node emitted all its tokens, and loads from the tier happen.
#[test]
fn random_workloads_with_a_cpu_tier_finish_and_load_from_it() {
    use crate::properties::{feed, random_client, random_engine, random_latency, random_router};
    use blis_sweep::sim::{
        DiskTier, KvOffload, KvTransferConfig, OffloadPolicy, PdDecider, PoolConfig, RequestStatus, Simulation,
    };
    use blis_sweep::workload::NodeKind;
    use rand::{RngExt, SeedableRng};
    use rand_xoshiro::Xoshiro256PlusPlus;

    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0x0FF10AD);
    let (mut loads, mut stored, mut completed) = (0, 0, 0);
    for case in 0..1000 {
        let mut engine = random_engine(&mut rng);
        engine.kv_offload = Some(KvOffload {
            cpu_blocks: rng.random_range(1..=200),
            block_bytes: rng.random_range(1..=1 << 21),
            bandwidth_bytes_per_s: rng.random_range(1_000_000..=100_000_000_000),
            policy: if rng.random_bool(0.5) { OffloadPolicy::All } else { OffloadPolicy::Evicted },
            disk: rng.random_bool(0.3).then(|| DiskTier {
                blocks: rng.random_range(1..=400),
                bandwidth_bytes_per_s: rng.random_range(1_000_000..=10_000_000_000),
            }),
        });
        let replicas = if rng.random_bool(0.5) { 1 } else { rng.random_range(2..=4) };
        let pool = PoolConfig::mixed(engine.clone(), replicas, random_router(&mut rng), random_latency(&mut rng));
        let mut sim = Simulation::pools(vec![pool], KvTransferConfig::UNUSED, PdDecider::Always);
        sim.check_invariants(true);
        sim.set_client(random_client(&mut rng));
        sim.set_request_timeout(rng.random_bool(0.2).then(|| rng.random_range(1_000..400_000)));
        for r in feed(&mut sim, &mut rng, case, None) {
            if r.status == RequestStatus::Unfinished {
                eprintln!("DEBUG {engine:?}\n{:?}\n{:?}", r.request, r.nodes);
            }
            assert_ne!(r.status, RequestStatus::Unfinished, "case {case}: never finished");
            if r.status != RequestStatus::Completed {
                continue;
            }
            completed += 1;
            for (sub, node) in r.request.sub_requests.iter().zip(&r.nodes) {
                if let NodeKind::Llm(call) = &sub.kind {
                    assert_eq!(node.token_times_us.len() as u32, call.tokens_to_emit(), "case {case}");
                }
            }
        }
        let stats = sim.engine_stats();
        loads += stats.cpu_loads;
        stored += stats.cpu_stored_blocks;
    }
    assert!(
        completed > 500 && loads > 50 && stored > 1000,
        "coverage: {completed} completed, {loads} loads, {stored} stored"
    );
}
