//! The one way to run a simulation: requests from a source, through the
//! client and the engine, out to a [`Sink`] in input order. `run`, sweeps,
//! calibration plans, `fit`, the benchmarks and the fuzz harness all go
//! through [`run`]; none has a loop of its own.
//!
//! Sinks are push-style, after ripgrep's: `begin`, one `request_done` per
//! request in input order, one `engine_step` per step when the step trace is
//! on, then `finish` with the run's end; any callback may fail, and the
//! first error ends the run at once (nothing more is simulated or pushed).
//! [`Tee`] feeds two sinks; the metrics collector is a sink like any other.

use std::io;

use super::client::Client;
use super::engine::{EngineConfig, EngineStats};
use super::order::InputOrder;
use super::outcome::{FinishedRequest, ResultSink, SPARE_BUFFERS};
use super::pool::{KvTransferConfig, PdDecider, PoolConfig};
use super::router::RouterConfig;
use super::simulation::Simulation;
use super::step_trace::EngineStep;
use super::window::{Measurement, Window};
use crate::latency::LatencyModel;
use crate::workload::Request;

/// How one run is set up.
#[derive(Debug, Clone)]
pub struct RunConfig<L> {
    /// The pools of replicas (one mixed pool: an aggregated deployment).
    pub pools: Vec<PoolConfig<L>>,
    /// How KV moves from prefill to decode replicas (P/D only).
    pub kv_transfer: KvTransferConfig,
    /// Which requests a P/D deployment splits.
    pub pd: PdDecider,
    /// How requests are sent.
    pub client: Client,
    /// Warm-up and ramp: the measurement window ([`super::Window`]).
    pub measurement: Measurement,
    /// Nothing is sent or simulated after this time, µs.
    pub horizon_us: Option<u64>,
    /// Without `horizon_us`, `blis replay`'s horizon: twice the last arrival
    /// read ([`REPLAY_HORIZON_AT_ZERO_US`] when every arrival is at 0), set
    /// when the source is exhausted — before then the clock has not passed
    /// the last arrival read, so the run is the one a horizon set from the
    /// start gives, for a client that sends each request at its arrival
    /// (open loop: the only client this is for). The source is read once.
    pub replay_horizon: bool,
    /// The client's request timeout, µs.
    pub timeout_us: Option<u64>,
    /// Push every engine step to the sink.
    pub step_trace: bool,
    /// Autoscale the one pool (`None`: fixed).
    pub autoscale: Option<super::AutoscaleConfig>,
}

impl<L> RunConfig<L> {
    /// An aggregated deployment: one mixed pool of `replicas` engines of
    /// `engine` behind `router`, priced by `latency`, with an open-loop
    /// client and no window, horizon, timeout or step trace (set them with
    /// struct update syntax).
    pub fn aggregated(engine: EngineConfig, replicas: u32, router: RouterConfig, latency: L) -> Self {
        let pool = PoolConfig::mixed(engine, replicas, router, latency);
        RunConfig {
            pools: vec![pool],
            kv_transfer: KvTransferConfig::UNUSED,
            pd: PdDecider::Always,
            client: Client::OpenLoop,
            measurement: Measurement::default(),
            horizon_us: None,
            replay_horizon: false,
            timeout_us: None,
            step_trace: false,
            autoscale: None,
        }
    }
}

impl<L: Clone> RunConfig<L> {
    /// The same run with every pool priced by `latency` (a fit's candidate).
    pub fn with_latency(mut self, latency: L) -> Self {
        for pool in &mut self.pools {
            pool.latency = latency.clone();
        }
        self
    }
}

/// Where a run's results go. Every callback may fail; the first error ends
/// the run.
pub trait Sink {
    /// Before anything is simulated.
    fn begin(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// One request, in input order, when it and every request before it
    /// have left.
    fn request_done(&mut self, request: &FinishedRequest) -> io::Result<()>;

    /// One engine step, in execution order (only with `step_trace`).
    fn engine_step(&mut self, _step: &EngineStep) -> io::Result<()> {
        Ok(())
    }

    /// After the last request.
    fn finish(&mut self, _end: &RunSummary) -> io::Result<()> {
        Ok(())
    }
}

/// Both sinks, `A` first.
#[derive(Debug)]
pub struct Tee<A, B>(pub A, pub B);

impl<A: Sink, B: Sink> Sink for Tee<A, B> {
    fn begin(&mut self) -> io::Result<()> {
        self.0.begin()?;
        self.1.begin()
    }
    fn request_done(&mut self, request: &FinishedRequest) -> io::Result<()> {
        self.0.request_done(request)?;
        self.1.request_done(request)
    }
    fn engine_step(&mut self, step: &EngineStep) -> io::Result<()> {
        self.0.engine_step(step)?;
        self.1.engine_step(step)
    }
    fn finish(&mut self, end: &RunSummary) -> io::Result<()> {
        self.0.finish(end)?;
        self.1.finish(end)
    }
}

impl<S: Sink + ?Sized> Sink for &mut S {
    fn begin(&mut self) -> io::Result<()> {
        (**self).begin()
    }
    fn request_done(&mut self, request: &FinishedRequest) -> io::Result<()> {
        (**self).request_done(request)
    }
    fn engine_step(&mut self, step: &EngineStep) -> io::Result<()> {
        (**self).engine_step(step)
    }
    fn finish(&mut self, end: &RunSummary) -> io::Result<()> {
        (**self).finish(end)
    }
}

/// A sink that may be absent (an output not asked for).
impl<S: Sink> Sink for Option<S> {
    fn begin(&mut self) -> io::Result<()> {
        self.as_mut().map_or(Ok(()), Sink::begin)
    }
    fn request_done(&mut self, request: &FinishedRequest) -> io::Result<()> {
        self.as_mut().map_or(Ok(()), |s| s.request_done(request))
    }
    fn engine_step(&mut self, step: &EngineStep) -> io::Result<()> {
        self.as_mut().map_or(Ok(()), |s| s.engine_step(step))
    }
    fn finish(&mut self, end: &RunSummary) -> io::Result<()> {
        self.as_mut().map_or(Ok(()), |s| s.finish(end))
    }
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// Requests read from the source (those after the horizon are not).
    pub requests: u64,
    /// The simulated time of the last event, µs.
    pub sim_end_us: u64,
    /// The engines' counters, summed over the replicas.
    pub stats: EngineStats,
    /// Each replica's counters (serving pools first, then prefill pools,
    /// each pool's replicas together, in the order the pools were given).
    pub replicas: Vec<EngineStats>,
    /// The measurement window.
    pub window: Window,
    /// What the autoscaler did (`None` without autoscaling).
    pub autoscale: Option<super::AutoscaleReport>,
    /// What the gateway did (with `router.admission` or `router.flow_control`).
    pub gateway: Option<super::GatewayStats>,
}

/// Why a run stopped early.
#[derive(Debug)]
pub enum RunError<E> {
    /// The source failed (a bad row, a cancelled sweep).
    Source(E),
    /// The sink failed (a full disk).
    Sink(io::Error),
    /// A sum of times passed the simulator's clock: nothing after it could
    /// be right, so the run stops (no result is pushed past it).
    Clock(super::outcome::ClockOverflow),
}

/// `blis replay`'s horizon when every arrival is at 0, µs (its 600 s).
pub const REPLAY_HORIZON_AT_ZERO_US: u64 = 600_000_000;

/// `blis replay`'s horizon for a trace whose last arrival is
/// `last_arrival_us`: twice it, or [`REPLAY_HORIZON_AT_ZERO_US`] at 0.
pub fn replay_horizon_us(last_arrival_us: u64) -> u64 {
    if last_arrival_us == 0 { REPLAY_HORIZON_AT_ZERO_US } else { last_arrival_us.saturating_mul(2) }
}

/// Simulates `requests` on `config`, pushing results to `sink`.
pub fn run<L: LatencyModel, E>(
    config: RunConfig<L>,
    requests: impl IntoIterator<Item = Result<Request, E>>,
    sink: &mut dyn Sink,
) -> Result<RunSummary, RunError<E>> {
    sink.begin().map_err(RunError::Sink)?;
    let mut sim = Simulation::pools(config.pools, config.kv_transfer, config.pd);
    sim.set_client(config.client);
    sim.set_measurement(config.measurement);
    sim.set_horizon(config.horizon_us);
    sim.set_request_timeout(config.timeout_us);
    sim.set_step_trace(config.step_trace);
    sim.set_autoscale(config.autoscale);
    let mut out = InputOrder::new(Forward { sink, error: None, spent: Vec::new() });
    let mut read = 0;
    let mut last_arrival_us = 0;
    for request in requests {
        let request = request.map_err(RunError::Source)?;
        read += 1;
        last_arrival_us = last_arrival_us.max(request.arrival_us());
        let more = sim.add_request(request, &mut out);
        if let Some(e) = out.inner.error.take() {
            return Err(RunError::Sink(e));
        }
        if let Some(e) = sim.clock_overflow() {
            return Err(RunError::Clock(e.clone()));
        }
        if !more {
            break;
        }
    }
    if config.replay_horizon && config.horizon_us.is_none() {
        sim.set_horizon(Some(replay_horizon_us(last_arrival_us)));
    }
    sim.finish(&mut out);
    if let Some(e) = sim.clock_overflow() {
        return Err(RunError::Clock(e.clone()));
    }
    debug_assert_eq!(out.held(), 0, "every request has left");
    if let Some(e) = out.inner.error.take() {
        return Err(RunError::Sink(e));
    }
    let summary = RunSummary {
        requests: read,
        sim_end_us: sim.now_us(),
        stats: sim.engine_stats(),
        replicas: sim.replica_stats(),
        window: sim.window(),
        autoscale: sim.autoscale_report(),
        gateway: sim.gateway_stats(),
    };
    out.inner.sink.finish(&summary).map_err(RunError::Sink)?;
    Ok(summary)
}

/// The simulation's (infallible) callbacks into the user's sink, keeping
/// its first error; nothing is pushed after it.
struct Forward<'a> {
    sink: &'a mut dyn Sink,
    error: Option<io::Error>,
    /// Token-time buffers of requests passed on, emptied, for the engines.
    spent: Vec<Vec<u64>>,
}

impl ResultSink for Forward<'_> {
    fn request_done(&mut self, request: FinishedRequest) {
        if self.error.is_none()
            && let Err(e) = self.sink.request_done(&request)
        {
            self.error = Some(e);
        }
        for node in request.nodes {
            if self.spent.len() >= SPARE_BUFFERS {
                break;
            }
            let mut times = node.token_times_us;
            if times.capacity() > 0 {
                times.clear();
                self.spent.push(times);
            }
        }
    }

    fn reclaim(&mut self, into: &mut Vec<Vec<u64>>) {
        while into.len() < SPARE_BUFFERS
            && let Some(b) = self.spent.pop()
        {
            into.push(b);
        }
    }

    fn engine_step(&mut self, step: &EngineStep) {
        if self.error.is_none()
            && let Err(e) = self.sink.engine_step(step)
        {
            self.error = Some(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::{Linear, StepPricer};
    use crate::workload::{LlmCall, NodeKind, RequestId, SubRequest};

    fn config() -> RunConfig<StepPricer> {
        let latency = StepPricer::Linear(Linear::new(&[1000.0, 1.0, 1.0]).unwrap());
        RunConfig {
            step_trace: true,
            ..RunConfig::aggregated(EngineConfig::for_tests(4, 64, 64), 1, RouterConfig::default(), latency)
        }
    }

    fn request<E>(id: u64, output_tokens: u32) -> Result<Request, E> {
        Ok(Request {
            traffic: Default::default(),
            request_id: RequestId::Int(id),
            arrival_time: 0.0,
            initial: vec![0],
            sub_requests: vec![SubRequest {
                next: vec![],
                interval: 0.0,
                kind: NodeKind::Llm(LlmCall::new(8, output_tokens)),
                result: None,
            }],
        })
    }

    /// Records the callbacks; fails on the `fail_at`-th request.
    #[derive(Default)]
    struct Log {
        calls: Vec<String>,
        fail_at: Option<usize>,
    }

    impl Sink for Log {
        fn begin(&mut self) -> io::Result<()> {
            self.calls.push("begin".into());
            Ok(())
        }
        fn request_done(&mut self, r: &FinishedRequest) -> io::Result<()> {
            self.calls.push(format!("request {}", r.request.request_id));
            if self.fail_at == Some(self.calls.iter().filter(|c| c.starts_with("request")).count()) {
                return Err(io::Error::other("disk full"));
            }
            Ok(())
        }
        fn engine_step(&mut self, _: &EngineStep) -> io::Result<()> {
            self.calls.push("step".into());
            Ok(())
        }
        fn finish(&mut self, end: &RunSummary) -> io::Result<()> {
            self.calls.push(format!("finish {}", end.requests));
            Ok(())
        }
    }

    #[test]
    fn requests_leave_in_input_order_between_begin_and_finish() {
        // Request 0 generates more tokens, so it finishes after request 1.
        let mut log = Log::default();
        let summary = run(config(), [request::<()>(0, 20), request(1, 2)], &mut log).unwrap();
        let requests: Vec<&String> = log.calls.iter().filter(|c| !c.starts_with("step")).collect();
        assert_eq!(requests, ["begin", "request 0", "request 1", "finish 2"]);
        assert!(log.calls.iter().any(|c| c == "step"));
        assert_eq!(summary.requests, 2);
    }

    #[test]
    fn the_first_error_ends_the_run() {
        let mut log = Log { fail_at: Some(1), ..Log::default() };
        let err = run(config(), [request::<()>(0, 2), request(1, 2)], &mut log).unwrap_err();
        assert!(matches!(err, RunError::Sink(e) if e.to_string() == "disk full"));
        assert!(!log.calls.iter().any(|c| c.starts_with("finish")));
        let mut tee = Tee(Log::default(), Log::default());
        let err = run(config(), [request(0, 2), Err("bad row")], &mut tee).unwrap_err();
        assert!(matches!(err, RunError::Source("bad row")));
    }

    /// Results and the end, as text: what two runs must agree on.
    #[derive(Default)]
    struct Outcomes(Vec<String>);

    impl Sink for Outcomes {
        fn request_done(&mut self, r: &FinishedRequest) -> io::Result<()> {
            let node = &r.nodes[0];
            self.0.push(format!("{} {:?} {:?} {:?}", r.request.request_id, r.status, node.error, node.token_times_us));
            Ok(())
        }
        fn finish(&mut self, end: &RunSummary) -> io::Result<()> {
            self.0.push(format!("end {} {}", end.requests, end.sim_end_us));
            Ok(())
        }
    }

    #[test]
    fn the_replay_horizon_found_as_the_source_ends_is_the_one_set_from_the_start() {
        // Arrivals at 1, 2 and 3 ms, long outputs (1 ms a step): twice the
        // last arrival, 6 ms, cuts the later requests short.
        let requests = || {
            (0..3u64).map(|i| {
                let mut r = request::<()>(i, 20)?;
                r.arrival_time = 0.001 * (i + 1) as f64;
                Ok::<_, ()>(r)
            })
        };
        let mut set = Outcomes::default();
        run(RunConfig { horizon_us: Some(6_000), ..config() }, requests(), &mut set).unwrap();
        let mut found = Outcomes::default();
        run(RunConfig { replay_horizon: true, ..config() }, requests(), &mut found).unwrap();
        assert_eq!(found.0, set.0);
        assert!(set.0.iter().any(|o| o.contains("Unfinished")), "{:?}", set.0);
        assert_eq!(set.0.last().unwrap(), "end 3 6000");
        // An explicit horizon wins; every arrival at 0: 600 s.
        let mut explicit = Outcomes::default();
        run(RunConfig { horizon_us: Some(6_000), replay_horizon: true, ..config() }, requests(), &mut explicit)
            .unwrap();
        assert_eq!(explicit.0, set.0);
        assert_eq!(replay_horizon_us(0), REPLAY_HORIZON_AT_ZERO_US);
    }
}
