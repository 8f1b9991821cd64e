//! Simulation speed and memory: N chat requests (Llama-3.1-8B, H100, TP1,
//! the default measured-kernel latency model, vLLM serving defaults) arriving open-loop (Poisson) near the
//! deployment's capacity, streamed from a generator into the simulation and
//! out through the result writer. Prints simulated requests per wall-second
//! and peak RSS for several N, each in its own process so the peaks are
//! comparable.
//!
//!     cargo bench --bench sim                 # 10k, 100k and 300k requests; then 8 replicas on 8x; then 4P+4D
//!     cargo bench --bench sim -- one 100000   # one size, in this process
//!     cargo bench --bench sim -- offload 100000   # the same with a 64 GiB CPU KV tier
//!     cargo bench --bench sim -- spec 100000  # the same, speculative decoding on
//!     cargo bench --bench sim -- spec-async 100000  # the same with async scheduling (vLLM's default)
//!     cargo bench --bench sim -- cluster 8 800000   # 8 replicas, 8x the traffic
//!     cargo bench --bench sim -- pd 400000    # 4 prefill + 4 decode replicas at PD_RATE
//!     cargo bench --bench sim -- write 100000 chat.jsonl   # the workload, as a file
//!     cargo bench --bench sim -- lora 100000  # `one` with engine.lora, each request one of 32 adapters (Zipf)
//!     cargo bench --bench sim -- lora-routers 20000 [30]   # 4 replicas (RATE or 30 req/s each): loads by router
//!
//! Not a test: nothing is asserted; the figures go in the README.

#[path = "common/chat.rs"]
mod chat;
#[path = "common/rss.rs"]
mod rss;

use std::io::{self, Write};
use std::path::Path;
use std::time::Instant;

use blis_sweep::metrics::MetricsCollector;
use blis_sweep::output::JsonlWriter;
use blis_sweep::sim::{self, FinishedRequest, Sink, Tee};
use blis_sweep::workload::writer::write_workload_row;
use blis_sweep::workload::{NodeKind, Request};
use chat::{RATE, chat};
use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Arrival rate of the 4P+4D cluster, requests/s: about 93 % of where it
/// saturates. Swept with `-- pd 20000 RATE`: served throughput tops out at
/// 263 req/s (260.5 served at 300 offered, 263.5 at 400, TTFT p99 6 s and
/// 22 s); TTFT p99 is 73 ms at 200 and 83 ms at 245.
const PD_RATE: f64 = 245.0;

/// Adapters of the LoRA runs, and the Zipf exponent of their popularity
/// (adapter k drawn with weight 1/k^s: a few hot adapters, a long tail).
const ADAPTERS: u32 = 32;
const ZIPF_S: f64 = 1.0;

/// [`chat`], each request served with one of [`ADAPTERS`] LoRA adapters
/// drawn Zipf from a stream of its own (the lengths and arrivals are
/// `chat`'s).
fn chat_lora(n: u64, rate: f64) -> impl Iterator<Item = Request> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
    let weights: Vec<f64> = (1..=ADAPTERS).map(|k| 1.0 / f64::from(k).powf(ZIPF_S)).collect();
    let total: f64 = weights.iter().sum();
    chat(n, rate).map(move |mut r| {
        let mut u = rng.random::<f64>() * total;
        let k = weights.iter().position(|w| {
            u -= w;
            u < 0.0
        });
        if let NodeKind::Llm(call) = &mut r.sub_requests[0].kind {
            call.lora = Some(format!("adapter-{}", k.unwrap_or(ADAPTERS as usize - 1)));
        }
        r
    })
}

/// The `one` deployment with `engine.lora: {max_loras: 4}` (or
/// `BENCH_MAX_LORAS`; rank 16, vLLM's
/// default CPU cache of max_loras adapters, loads at the default PCIe and
/// NVMe bandwidths), `replicas` of it behind `policy`.
fn lora_deployment(replicas: u32, policy: &str) -> blis_sweep::scenario::Deployment {
    // `BENCH_MAX_LORAS=32`: every adapter fits in a step (the feature's own
    // cost, without max_loras holding requests back).
    let max_loras = std::env::var("BENCH_MAX_LORAS").map_or(4, |v| v.parse().expect("a count"));
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("sweeps/scenarios/llama-3.1-8b-h100-tp1.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut spec: blis_sweep::scenario::ScenarioSpec = serde_saphyr::from_str(&text).unwrap();
    spec.engine.lora = Some(blis_sweep::scenario::spec::LoraSpec { max_loras: Some(max_loras), ..Default::default() });
    let mut d = blis_sweep::scenario::resolve(spec, path.parent().unwrap(), "lora").unwrap();
    for pool in &mut d.pools {
        pool.replicas = replicas;
        pool.router.policy = blis_sweep::sim::RoutingPolicy::named(policy).expect("listed");
    }
    d
}

/// Nothing: `BENCH_NO_WRITE=1` measures the simulation with metrics only.
struct Nothing;

impl Sink for Nothing {
    fn request_done(&mut self, _: &FinishedRequest) -> io::Result<()> {
        Ok(())
    }
}

/// `replicas` copies of the deployment behind a least-requests router, fed
/// `replicas` times the traffic; with `offload`, each with a CPU KV tier.
fn one(n: u64, rate: f64, replicas: u32, offload: bool) {
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("sweeps/scenarios/llama-3.1-8b-h100-tp1.yaml");
    let mut d = blis_sweep::scenario::load(&scenario).unwrap();
    // (The run reads its pools: a scenario without `pools:` is one.)
    for pool in &mut d.pools {
        if offload {
            // `kv_offload: {cpu_gib: 64}` as the scenario resolves it: 64 GiB
            // of Llama-3.1-8B's 2 MiB blocks (128 KiB a token × 16), 50 GB/s.
            pool.engine.kv_offload = Some(blis_sweep::sim::KvOffload {
                cpu_blocks: 32_768,
                block_bytes: 2 << 20,
                bandwidth_bytes_per_s: 50_000_000_000,
                policy: blis_sweep::sim::OffloadPolicy::All,
                disk: None,
            });
        }
        pool.replicas = replicas;
        if replicas > 1 {
            pool.router.policy = blis_sweep::sim::RoutingPolicy::named("least-requests").expect("listed");
        }
    }
    measure(&d, n, rate * f64::from(replicas), &format!("{replicas} replica(s)"), false);
}

/// The same deployment with speculative decoding: an EAGLE head, k = 3,
/// acceptance rate 0.7 (α_j = 0.7^j), synchronous scheduling or (with
/// `async_scheduling`) vLLM's default async, at `rate`. `-- spec 100000`
/// against `-- one 100000` is the feature's cost in simulated requests/s.
fn spec(n: u64, rate: f64, async_scheduling: bool) {
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("sweeps/scenarios/llama-3.1-8b-h100-tp1.yaml");
    let sync = if async_scheduling { "" } else { "  async_scheduling: false\n" };
    let text = std::fs::read_to_string(&scenario)
        .unwrap()
        .replace("engine:\n", &format!("engine:\n{sync}  speculative: {{method: eagle, k: 3, rate: 0.7}}\n"));
    let tmp = std::env::temp_dir().join(format!("blis-bench-spec-{}.yaml", std::process::id()));
    std::fs::write(&tmp, text).unwrap();
    let d = blis_sweep::scenario::load(&tmp).unwrap();
    std::fs::remove_file(&tmp).unwrap();
    measure(&d, n, rate, "eagle k=3 rate 0.7", false);
}

/// The same deployment as 4 prefill + 4 decode replicas (both pools behind
/// least-requests, KV over NVLink), at `rate`.
fn pd(n: u64, rate: f64) {
    let scenario =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pools-scenarios/pd-4p4d-llama-3.1-8b-h100.yaml");
    let d = blis_sweep::scenario::load(&scenario).unwrap();
    measure(&d, n, rate, "4P+4D", false);
}

/// `n` chat requests at `rate` (each with a LoRA adapter when `lora`)
/// through `d`'s run configuration, results written as `run` writes them
/// (into a counting sink).
fn measure(d: &blis_sweep::scenario::Deployment, n: u64, rate: f64, label: &str, lora: bool) {
    let mut bytes = 0u64;
    let mut metrics = MetricsCollector::default();
    let mut counted = CountingSink(&mut bytes);
    let mut rows = JsonlWriter::new(&mut counted, "results");
    let write = std::env::var_os("BENCH_NO_WRITE").is_none();
    let config = d.run_config();
    let wall = Instant::now();
    // The production path: the one run function, metrics and writer as sinks.
    let source: Box<dyn Iterator<Item = Request>> =
        if lora { Box::new(chat_lora(n, rate)) } else { Box::new(chat(n, rate)) };
    let source = source.map(Ok::<_, io::Error>);
    let end = if write {
        sim::run(config, source, &mut Tee(&mut metrics, &mut rows))
    } else {
        sim::run(config, source, &mut Tee(&mut metrics, Nothing))
    }
    .unwrap_or_else(|_| panic!("the benchmark's sinks do not fail"));
    let m = metrics.finish(&end);
    drop(rows);
    let wall_s = wall.elapsed().as_secs_f64();
    println!(
        "{n:>8} requests  {label}  {:>9.0} simulated req/s  wall {wall_s:>6.2} s  peak RSS {:>6.1} MiB  \
         | sim {:.0} s, {} steps, {:.1} req/s served, TTFT p99 {:.0} ms, ITL mean {:.1} ms, {:.0} MB of result JSONL{}",
        n as f64 / wall_s,
        rss::peak_rss_mib(),
        m.sim_duration_s,
        m.engine_steps,
        m.responses_per_sec,
        m.ttft_p99_ms,
        m.itl_mean_ms,
        bytes as f64 / 1e6,
        if lora {
            format!(
                ", TTFT mean {:.1} p50 {:.1} ms, adapter loads {} from CPU + {} from disk",
                m.ttft_mean_ms, m.ttft_p50_ms, end.stats.lora_loads_cpu, end.stats.lora_loads_disk
            )
        } else {
            String::new()
        },
    );
}

/// Counts the bytes written and discards them.
struct CountingSink<'a>(&'a mut u64);

impl Write for CountingSink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        *self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn main() {
    // cargo appends `--bench`; only positional arguments are ours.
    let args: Vec<String> = std::env::args().filter(|a| !a.starts_with("--")).collect();
    if let Some(i) = args.iter().position(|a| a == "write") {
        // Writes the workload itself, to time the whole CLI on it.
        let n: u64 = args[i + 1].parse().expect("a request count");
        let mut out = io::BufWriter::new(std::fs::File::create(&args[i + 2]).expect("an output path"));
        let mut buf = Vec::new();
        for r in chat(n, RATE) {
            buf.clear();
            write_workload_row(&mut buf, &r);
            out.write_all(&buf).unwrap();
        }
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "one") {
        let rate = args.get(i + 2).map_or(RATE, |r| r.parse().expect("a rate in req/s"));
        one(args[i + 1].parse().expect("a request count"), rate, 1, false);
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "offload") {
        let rate = args.get(i + 2).map_or(RATE, |r| r.parse().expect("a rate in req/s"));
        one(args[i + 1].parse().expect("a request count"), rate, 1, true);
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "lora") {
        let rate = args.get(i + 2).map_or(RATE, |r| r.parse().expect("a rate in req/s"));
        measure(&lora_deployment(1, "round-robin"), args[i + 1].parse().expect("a request count"), rate, "LoRA", true);
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "lora-routers") {
        // Four replicas on four times the traffic, each router in turn.
        let n = args[i + 1].parse().expect("a request count");
        let rate = args.get(i + 2).map_or(RATE, |r| r.parse().expect("a rate per replica in req/s"));
        for policy in ["round-robin", "least-requests", "lora-affinity"] {
            measure(&lora_deployment(4, policy), n, 4.0 * rate, policy, true);
        }
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "spec" || a == "spec-async") {
        let rate = args.get(i + 2).map_or(RATE, |r| r.parse().expect("a rate in req/s"));
        spec(args[i + 1].parse().expect("a request count"), rate, args[i] == "spec-async");
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "pd") {
        let rate = args.get(i + 2).map_or(PD_RATE, |r| r.parse().expect("a rate in req/s"));
        pd(args[i + 1].parse().expect("a request count"), rate);
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "cluster") {
        let replicas = args[i + 1].parse().expect("a replica count");
        one(args[i + 2].parse().expect("a request count"), RATE, replicas, false);
        return;
    }
    println!(
        "Llama-3.1-8B, H100, TP1, default latency model; Poisson {RATE} req/s; results written as JSONL to a counting sink"
    );
    let sizes = [10_000u64, 100_000, 300_000];
    let runs = sizes.iter().map(|n| vec!["one".to_owned(), n.to_string()]);
    // Eight replicas on eight times the traffic (416 req/s), least-requests.
    let clusters = sizes.iter().map(|n| vec!["cluster".to_owned(), "8".to_owned(), (8 * n).to_string()]);
    // Four prefill and four decode replicas (4P+4D) at PD_RATE.
    let pd = [100_000u64, 400_000].map(|n| vec!["pd".to_owned(), n.to_string()]);
    for args in runs.chain(clusters).chain(pd) {
        let status = std::process::Command::new(std::env::current_exe().unwrap()).args(&args).status().unwrap();
        assert!(status.success());
    }
}
