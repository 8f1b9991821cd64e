//! The benchmarks' chat traffic: BLIS's `chatbot` lengths, Poisson
//! arrivals, seeded (the same requests in every benchmark and path).

use blis_sweep::workload::{LlmCall, NodeKind, Request, RequestId, SubRequest};
use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Arrival rate, requests/s: about 93 % of where this deployment saturates.
/// Swept with `-- one 50000 RATE`: TTFT p99 is 74 ms at 50 req/s, 0.26 s at
/// 52 and 0.8 s at 54, and diverges from 56 (the served rate stops following
/// the offered rate at 56.2 req/s).
pub const RATE: f64 = 52.0;

/// BLIS's `chatbot` preset lengths (`../shared/reference/blis-spec.md` §9.8):
/// prompt and output gaussian, mean 256, std 100, clamped to [2, 800] and
/// [1, 1024]. Poisson arrivals at `rate`.
pub fn chat(n: u64, rate: f64) -> impl Iterator<Item = Request> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(42);
    let mut t = 0.0f64;
    (0..n).map(move |i| {
        t += -(1.0 - rng.random::<f64>()).ln() / rate;
        let gaussian = |rng: &mut Xoshiro256PlusPlus, min: f64, max: f64| {
            let u1: f64 = rng.random::<f64>().max(1e-12);
            let u2: f64 = rng.random();
            let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            (256.0 + 100.0 * z).round().clamp(min, max) as u32
        };
        let input_tokens = gaussian(&mut rng, 2.0, 800.0);
        let output_tokens = gaussian(&mut rng, 1.0, 1024.0);
        Request {
            traffic: Default::default(),
            request_id: RequestId::Int(i),
            arrival_time: (t * 1e6).round() / 1e6,
            initial: vec![0],
            sub_requests: vec![SubRequest {
                next: vec![],
                interval: 0.0,
                kind: NodeKind::Llm(LlmCall::new(input_tokens, output_tokens)),
                result: None,
            }],
        }
    })
}
