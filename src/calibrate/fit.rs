//! Fitting the roofline's constants to real runs: a Nelder–Mead search, in
//! log space, over the constants named, each evaluation simulating every run
//! (in parallel) and scoring it against the real measurements.
//!
//! The score is the mean over runs and metrics of (error / target)², with the
//! accuracy targets of our acceptance criteria as scales: mean E2E and mean
//! ITL 3 %, mean TTFT 10 %, p99 TTFT 25 %. Constants are per GPU (and engine
//! version): fit them on the runs of one GPU, never per run or per model.

use rayon::prelude::*;
use serde::Serialize;

use super::observed::{NodeObs, Observations, RequestObs};
use super::report::{CalibrateOptions, compare};
use super::stats::WorkloadLevel;
use crate::latency::StepPricer;
use crate::scenario::Deployment;
use crate::sim::{self, FinishedRequest, RunConfig, Sink};
use crate::workload::{NodeKind, Request};

/// One real run to fit against.
#[derive(Debug, Clone)]
pub struct FitRun {
    /// Its name.
    pub name: String,
    /// How it was served.
    pub deployment: Deployment,
    /// What was sent.
    pub requests: Vec<Request>,
    /// What the real server measured.
    pub real: Truth,
    /// The real client's request timeout, µs.
    pub timeout_us: Option<u64>,
    /// How the real client sent them (open loop, or a benchmark's cap).
    pub client: crate::sim::Client,
}

/// What a real run measured.
#[derive(Debug, Clone)]
pub enum Truth {
    /// Every request's latencies.
    PerRequest(Observations),
    /// Only aggregates, whole run (stage −1) and per load stage.
    Aggregates {
        /// Each stage's `[start, end)`, seconds.
        stages: Vec<(f64, f64)>,
        /// The measured aggregates.
        aggregates: Vec<crate::workload::import::blis_trainval::Aggregate>,
    },
}

/// Errors of one run, as fractions (sim / real − 1); `None` where the real
/// run did not measure it (a benchmark that reports only TPOT).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[allow(missing_docs)]
pub struct RunErrors {
    pub run: String,
    pub ttft_mean: Option<f64>,
    pub ttft_p99: Option<f64>,
    /// Mean ITL, or mean TPOT where that is what was measured.
    pub itl_mean: Option<f64>,
    pub e2e_mean: Option<f64>,
    pub e2e_mape: Option<f64>,
}

/// Constants by name, as a latency model's constants serialize.
pub type Constants = serde_json::Map<String, serde_json::Value>;

/// A fit's outcome.
#[derive(Debug, Clone)]
pub struct FitResult {
    /// The fitted constants (the others as given).
    pub constants: Constants,
    /// Final score.
    pub loss: f64,
    /// Per-run errors with the fitted constants.
    pub runs: Vec<RunErrors>,
    /// Simulations of the whole set run.
    pub evaluations: usize,
}

/// Observations of simulated requests, as the calibration reads real ones:
/// a sink fed in input order.
#[derive(Debug, Default)]
pub struct Observe(pub Observations);

impl Sink for Observe {
    fn request_done(&mut self, r: &FinishedRequest) -> std::io::Result<()> {
        let obs = &mut self.0;
        let index = obs.order.len();
        let id = r.request.request_id.to_string();
        let mut llm_nodes = Vec::new();
        let mut output_tokens = 0;
        for (i, (sub, node)) in r.request.sub_requests.iter().zip(&r.nodes).enumerate() {
            let NodeKind::Llm(call) = &sub.kind else { continue };
            output_tokens += node.token_times_us.len() as u64;
            let (Some(start), Some(&first)) = (node.start_us, node.token_times_us.first()) else { continue };
            let gaps = node.token_times_us.len() - 1;
            llm_nodes.push(i as u32);
            obs.nodes.insert(
                (id.clone(), i as u32),
                NodeObs {
                    ttft_us: (first - start) as f64,
                    itl_us: (gaps > 0).then(|| (node.token_times_us[gaps] - first) as f64 / gaps as f64),
                    input_tokens: u64::from(call.input_tokens),
                    output_tokens: u64::from(call.output_tokens),
                },
            );
        }
        let e2e_us = r.finish_us.map(|f| (f - r.send_us) as f64);
        obs.requests
            .insert(id.clone(), RequestObs { index, send_us: r.send_us as f64, e2e_us, output_tokens, llm_nodes });
        obs.order.push(id);
        Ok(())
    }
}

/// Replays `requests` open loop on `deployment`, priced by `latency`, with
/// the client's request timeout, and observes them as `calibrate` reads a
/// result file.
pub fn replay(
    deployment: &Deployment,
    latency: StepPricer,
    requests: &[Request],
    timeout_us: Option<u64>,
) -> Observations {
    replay_with(deployment, latency, requests, timeout_us, crate::sim::Client::OpenLoop)
}

/// [`replay`] with another client (a benchmark's concurrency cap).
pub fn replay_with(
    deployment: &Deployment,
    latency: StepPricer,
    requests: &[Request],
    timeout_us: Option<u64>,
    client: crate::sim::Client,
) -> Observations {
    let config = RunConfig { timeout_us, client, ..deployment.run_config().with_latency(latency) };
    let mut observe = Observe::default();
    let source = requests.iter().map(|r| Ok::<_, std::convert::Infallible>(r.clone()));
    // Neither the source nor observing can fail.
    let _ = sim::run(config, source, &mut observe);
    observe.0
}

/// Replays a benchmark that first sends `warmups` and waits for every one
/// of them (InferenceX's and genai-perf's warm-up phase), then `measured`,
/// all at most `limit` in flight, and observes the measured requests only:
/// the run's measurement window opens when the warm-ups have all left
/// ([`crate::sim::Warmup::Requests`]) and the measured requests are sent
/// 1 µs after the last of them finished (found by simulating the warm-ups
/// alone first: nothing else runs before then, so the time is the same).
pub fn replay_after_warmups(
    deployment: &Deployment,
    latency: StepPricer,
    warmups: &[Request],
    measured: &[Request],
    limit: u32,
) -> Observations {
    let client = crate::sim::Client::Capped { limit };
    if warmups.is_empty() {
        return replay_with(deployment, latency, measured, None, client);
    }
    let phase = replay_with(deployment, latency.clone(), warmups, None, client);
    let done_us = phase.requests.values().filter_map(|r| r.e2e_us.map(|e| r.send_us + e)).fold(0.0, f64::max);
    let start_s = (done_us + 1.0) / 1e6;
    let requests: Vec<Request> = warmups
        .iter()
        .cloned()
        .chain(measured.iter().cloned().map(|mut r| {
            r.arrival_time = start_s;
            r
        }))
        .collect();
    let measurement =
        crate::sim::Measurement { warmup: crate::sim::Warmup::Requests(warmups.len() as u64), ramp_us: 0 };
    let config = RunConfig { client, measurement, ..deployment.run_config().with_latency(latency) };
    let mut observe = InWindow(Observe::default());
    let source = requests.into_iter().map(Ok::<_, std::convert::Infallible>);
    // Neither the source nor observing can fail.
    let _ = sim::run(config, source, &mut observe);
    observe.0.0
}

/// Observes only the requests sent in the measurement window.
struct InWindow(Observe);

impl Sink for InWindow {
    fn request_done(&mut self, r: &FinishedRequest) -> std::io::Result<()> {
        if r.in_window { self.0.request_done(r) } else { Ok(()) }
    }
}

/// Simulates `run` with its latency model's constants replaced by `c`, and
/// measures its errors.
pub fn evaluate(run: &FitRun, c: &Constants) -> Result<RunErrors, String> {
    let d = &run.deployment;
    let sim = replay_with(d, d.serving().latency.with_constants(c)?, &run.requests, run.timeout_us, run.client);
    let real = match &run.real {
        Truth::PerRequest(real) => real,
        Truth::Aggregates { stages, aggregates } => {
            let rows = super::aggregates::compare(&sim, stages, aggregates);
            let err = |metric: &str| {
                rows.iter()
                    .find(|r| r.stage == -1 && r.metric == metric && r.real_ms > 0.0)
                    .map(|r| r.sim_ms / r.real_ms - 1.0)
            };
            return Ok(RunErrors {
                run: run.name.clone(),
                ttft_mean: err("ttft_mean"),
                ttft_p99: err("ttft_p99"),
                // A benchmark that reports TPOT, not ITL (aiconfigurator's).
                itl_mean: err("itl_mean").or_else(|| err("tpot_mean")),
                e2e_mean: err("e2e_mean"),
                // No per-request data: no per-request error.
                e2e_mape: None,
            });
        }
    };
    let report = compare(real, &sim, &CalibrateOptions::default());
    // Relative error of one (real, sim) pair of aggregates of `metric`.
    let err = |metric: &str, pick: fn(&WorkloadLevel) -> (f64, f64)| {
        report.metrics.get(metric).map(|m| {
            let (real, sim) = pick(&m.workload_level);
            if real > 0.0 { sim / real - 1.0 } else { 0.0 }
        })
    };
    let mean = |w: &WorkloadLevel| (w.real_mean, w.sim_mean);
    let p99 = |w: &WorkloadLevel| (w.real_p99, w.sim_p99);
    Ok(RunErrors {
        run: run.name.clone(),
        ttft_mean: err("ttft", mean),
        ttft_p99: err("ttft", p99),
        itl_mean: err("itl", mean),
        e2e_mean: err("e2e", mean),
        e2e_mape: report.metrics.get("e2e").map(|m| m.request_level.mape),
    })
}

/// Every run's errors under constants `c`.
pub fn evaluate_all(runs: &[FitRun], c: &Constants) -> Result<Vec<RunErrors>, String> {
    runs.par_iter().map(|r| evaluate(r, c)).collect()
}

/// Errors of this many targets and more count (nearly) alike, in [`loss`].
const CAP: f64 = 20.0;

/// The measurements a fit scores, each with its accuracy target (the
/// acceptance criteria's): the error is counted in targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scored {
    /// Mean E2E, target 3 %.
    E2eMean,
    /// Mean ITL (or TPOT where that is what was measured), target 3 %.
    ItlMean,
    /// Mean TTFT, target 10 %.
    TtftMean,
    /// p99 TTFT, target 25 %.
    TtftP99,
}

impl Scored {
    /// Every measurement, the default.
    pub const ALL: [Scored; 4] = [Scored::E2eMean, Scored::ItlMean, Scored::TtftMean, Scored::TtftP99];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scored::E2eMean => "e2e_mean",
            Scored::ItlMean => "itl_mean",
            Scored::TtftMean => "ttft_mean",
            Scored::TtftP99 => "ttft_p99",
        }
    }

    /// The measurement called `name`.
    pub fn parse(name: &str) -> Option<Scored> {
        Scored::ALL.into_iter().find(|s| s.name() == name)
    }

    fn error_and_target(self, e: &RunErrors) -> (Option<f64>, f64) {
        match self {
            Scored::E2eMean => (e.e2e_mean, 0.03),
            Scored::ItlMean => (e.itl_mean, 0.03),
            Scored::TtftMean => (e.ttft_mean, 0.10),
            Scored::TtftP99 => (e.ttft_p99, 0.25),
        }
    }
}

/// The score of a set of run errors on the `scored` measurements (lower is
/// better).
pub fn loss(errors: &[RunErrors], scored: &[Scored]) -> f64 {
    let per_run = |e: &RunErrors| {
        // Over the metrics the run measured. Past 20 targets a term grows
        // only logarithmically: a run that saturates in some corner of the
        // search must not outweigh every other run, yet a search that starts
        // in that corner still sees which way is out (a flat cap left it
        // nowhere to go: fitting a CPU server's linear model from a start
        // that saturated its busier run stopped at that run +78 %).
        let present: Vec<f64> = scored
            .iter()
            .filter_map(|s| {
                let (e, target) = s.error_and_target(e);
                e.map(|e| e / target)
            })
            .collect();
        if present.is_empty() {
            return 0.0;
        }
        let term = |t: f64| {
            let t2 = t * t;
            if t2 <= CAP * CAP { t2 } else { CAP * CAP + (t2 - CAP * CAP).ln_1p() }
        };
        present.iter().map(|&t| term(t)).sum::<f64>() / present.len() as f64
    };
    if errors.is_empty() { 0.0 } else { errors.iter().map(per_run).sum::<f64>() / errors.len() as f64 }
}

/// Fits `params` (keys of `start`, the runs' latency model's constants)
/// starting from `start`, scoring the `scored` measurements.
pub fn fit(
    runs: &[FitRun],
    start: &Constants,
    params: &[String],
    scored: &[Scored],
    max_evaluations: usize,
) -> Result<FitResult, String> {
    for p in params {
        if !start.get(p).is_some_and(serde_json::Value::is_number) {
            let names: Vec<&str> = start.keys().map(String::as_str).collect();
            return Err(format!("unknown constant `{p}`; fittable: {}", names.join(", ")));
        }
    }
    if runs.is_empty() {
        return Err("no runs to fit".to_owned());
    }
    let value = |c: &Constants, p: &str| c[p].as_f64().expect("checked numeric");
    let mut evaluations = 0;
    let constants_at = |x: &[f64]| {
        let mut c = start.clone();
        for (p, v) in params.iter().zip(x) {
            c.insert(p.clone(), serde_json::json!(v.exp()));
        }
        c
    };
    let mut score = |x: &[f64]| {
        evaluations += 1;
        // Out-of-range constants (an efficiency above 1) score infinitely badly.
        evaluate_all(runs, &constants_at(x)).map_or(f64::INFINITY, |errors| loss(&errors, scored))
    };
    // Zero starts (request_overhead_us) are searched from 1 ms, the order of
    // an HTTP front end's time.
    let x0: Vec<f64> =
        params.iter().map(|p| value(start, p)).map(|v| if v > 0.0 { v.ln() } else { 1000f64.ln() }).collect();
    // Steps of e^0.7 ≈ 2x: the constants are known to a factor of a few.
    let best = nelder_mead(&mut score, &x0, 0.7, max_evaluations);
    let constants = constants_at(&best);
    let errors = evaluate_all(runs, &constants)?;
    Ok(FitResult { constants, loss: loss(&errors, scored), runs: errors, evaluations: evaluations + 1 })
}

/// Minimises `f` from `x0` (initial simplex steps of `step`), stopping after
/// `max_evaluations` or when the simplex's values agree to 1e-6.
fn nelder_mead(f: &mut dyn FnMut(&[f64]) -> f64, x0: &[f64], step: f64, max_evaluations: usize) -> Vec<f64> {
    let n = x0.len();
    let mut simplex: Vec<(Vec<f64>, f64)> = Vec::with_capacity(n + 1);
    simplex.push((x0.to_vec(), f(x0)));
    for i in 0..n {
        let mut x = x0.to_vec();
        x[i] += step;
        let v = f(&x);
        simplex.push((x, v));
    }
    let mut evals = n + 1;
    while evals < max_evaluations {
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        if (simplex[n].1 - simplex[0].1).abs() <= 1e-6 * (1.0 + simplex[0].1.abs()) {
            break;
        }
        let centroid: Vec<f64> = (0..n).map(|j| simplex[..n].iter().map(|p| p.0[j]).sum::<f64>() / n as f64).collect();
        let along =
            |t: f64| -> Vec<f64> { (0..n).map(|j| centroid[j] + t * (simplex[n].0[j] - centroid[j])).collect() };
        let reflected = along(-1.0);
        let fr = f(&reflected);
        evals += 1;
        if fr < simplex[0].1 {
            let expanded = along(-2.0);
            let fe = f(&expanded);
            evals += 1;
            simplex[n] = if fe < fr { (expanded, fe) } else { (reflected, fr) };
        } else if fr < simplex[n - 1].1 {
            simplex[n] = (reflected, fr);
        } else {
            let contracted = along(0.5);
            let fc = f(&contracted);
            evals += 1;
            if fc < simplex[n].1 {
                simplex[n] = (contracted, fc);
            } else {
                let best = simplex[0].0.clone();
                for p in simplex.iter_mut().skip(1) {
                    p.0 = p.0.iter().zip(&best).map(|(x, b)| b + 0.5 * (x - b)).collect();
                    p.1 = f(&p.0);
                    evals += 1;
                }
            }
        }
    }
    simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
    simplex.swap_remove(0).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nelder_mead_finds_a_quadratic_minimum() {
        let mut f = |x: &[f64]| (x[0] - 3.0).powi(2) + 2.0 * (x[1] + 1.0).powi(2);
        let x = nelder_mead(&mut f, &[0.0, 0.0], 1.0, 500);
        assert!((x[0] - 3.0).abs() < 1e-2 && (x[1] + 1.0).abs() < 1e-2, "{x:?}");
    }

    /// Errors count in targets over the measurements scored; past the cap
    /// they still grow, so a saturated corner is never flat.
    #[test]
    fn the_loss_scores_what_it_is_told_and_grows_past_its_cap() {
        let run = |ttft_p99: f64, e2e: f64| RunErrors {
            run: "r".into(),
            ttft_mean: Some(0.10),
            ttft_p99: Some(ttft_p99),
            itl_mean: Some(0.0),
            e2e_mean: Some(e2e),
            e2e_mape: None,
        };
        let all = loss(&[run(0.5, 0.03)], &Scored::ALL);
        assert!((all - (1.0 + 0.0 + 1.0 + 4.0) / 4.0).abs() < 1e-12, "{all}");
        let no_tail = [Scored::E2eMean, Scored::ItlMean, Scored::TtftMean];
        assert!((loss(&[run(0.5, 0.03)], &no_tail) - 2.0 / 3.0).abs() < 1e-12);
        let (far, farther) = (loss(&[run(0.0, 1.0)], &no_tail), loss(&[run(0.0, 2.0)], &no_tail));
        assert!(far > 400.0 / 3.0 && farther > far && farther < 410.0 / 3.0, "{far} {farther}");
        assert_eq!(Scored::parse("ttft_p99"), Some(Scored::TtftP99));
        assert_eq!(Scored::parse("p99"), None);
    }
}
