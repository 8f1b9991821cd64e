//! Capacity search (`blis-sweep capacity PLAN.yaml`, a plan's `search:`):
//! per deployment — each scenario with each combination of grid overrides —
//! the highest request rate (or, closed loop, the most concurrent users) at
//! which the runs meet the search's SLO (`slo_met`: the targets at the SLO's
//! percentile), to a stated relative precision.
//!
//! The search probes the ends of `range` first: below the low end it reports
//! no capacity, at the high end "at least". Between a probe that met the SLO
//! and one that did not it bisects (geometrically for rates, by integers for
//! users) until they are within `precision`. A probe runs every seed of the
//! grid and counts as met only when every seed met it (the worst seed
//! decides). A rate is reached by dividing the workload's arrivals by
//! `rate / base rate`, the base rate being the workload's own (requests − 1
//! over the span of their arrivals).
//!
//! A probe is judged on its runs' measurement windows (warm-up and drain
//! left out, see [`crate::sim::Window`]) by their [`Verdict`]: the SLO's
//! targets with every failed request counted as a miss, the load held long
//! enough to show it (else `too_short`) and served (else `overloaded`). A
//! probe that could not run at all is no capacity: the deployment's row is
//! `failed`, with the run's error, and the command exits non-zero.
//!
//! Every probe is a normal run of the sweep: the searches proceed in rounds,
//! each round one probe for every deployment still searching, run in
//! parallel on the sweep's pool; every run lands in the output's tables and
//! a rerun reuses them. The search drives [`crate::sweep`] from above: the
//! sweep knows a plan's `search:` ([`crate::sweep::plan::Search`]) but not
//! this module.
//!
//! A deployment with `pools:` is searched like any other (a grid override
//! such as `pools.decode.replicas: [1, 2, 3]` makes one deployment a value):
//! its GPUs are its pools' together, its cost per GPU-hour the sum over its
//! pools of their GPUs at their GPU's `gpu_hour_usd`, and its row names its
//! pools. When the deployments hold both aggregated (no prefill pool) and
//! disaggregated ones, the printed table ends with the best of each at every
//! GPU count that has both ([`table`]).

mod table;

pub use table::write;

use std::collections::BTreeMap;

use crate::metrics::{Metrics, Verdict};
use crate::scenario::{Deployment, Pool};
use crate::sim::Role;
use crate::sweep::error::SweepError;
use crate::sweep::executor::{self, RunFinished, SweepOptions};
use crate::sweep::grid::{Cell, Plan};
use crate::sweep::output_dir::Layout;
use crate::sweep::plan::{Over, Search};
use crate::sweep::tables::DeploymentRow;

/// One deployment's answer.
#[derive(Debug, Clone)]
pub struct Capacity {
    /// Scenario name.
    pub scenario: String,
    /// Its grid overrides.
    pub overrides: Vec<(String, serde_json::Value)>,
    /// GPUs: tp × dp × replicas, summed over the pools.
    pub gpus: u64,
    /// The GPU's name (of the first pool that serves requests).
    pub gpu: String,
    /// The pools as `name replicas×TPtp GPU` joined by ` + ` (see
    /// [`pools_text`]); `None` for a deployment without `pools:`.
    pub pools: Option<String>,
    /// Without `pools:`, its replicas, TP and GPU (`2×TP4 H100`; `-` when
    /// the scenario did not resolve).
    pub layout: String,
    /// Whether it has a prefill pool (prefill/decode disaggregation).
    pub disaggregated: bool,
    /// The deployment as the tables' columns.
    pub(crate) deployment: DeploymentRow,
    /// The highest load that met the SLO (`None`: not even the low end).
    pub max: Option<f64>,
    /// Whether the high end met it too (the capacity is at least `max`).
    pub at_least: bool,
    /// The worst seed's metrics at `max`.
    pub metrics: Option<Metrics>,
    /// Cost per million output tokens at `max`, when every pool's GPU has a
    /// price (see [`hourly_cost`]).
    pub cost_per_mtok: Option<f64>,
    /// Probes run.
    pub probes: usize,
    /// What the answer is (see [`Answer`]).
    pub answer: Answer,
    /// Why: a failed probe's error, the failed requests, the load a too
    /// short workload could not show.
    pub note: Option<String>,
}

/// What a deployment's row says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The capacity, bracketed to the precision.
    Capacity,
    /// The high end met the SLO: at least that.
    AtLeast,
    /// The low end missed: less than that.
    BelowRange,
    /// More than the SLO allows of the requests fail (unservable, rejected,
    /// timed out) already at the low end: the workload cannot meet the
    /// attainment target at any load in the range.
    RequestsFailed,
    /// The workload is too short to show the next load (its window lasts
    /// fewer than ten request lifetimes, or holds no request): the capacity
    /// is at least the last load met, no more is known.
    TooShort,
    /// A probe could not run: no capacity.
    Failed,
}

impl Answer {
    /// As the table's `verdict` column writes it.
    pub fn name(self) -> &'static str {
        match self {
            Answer::Capacity => "capacity",
            Answer::AtLeast => "at_least",
            Answer::BelowRange => "below_range",
            Answer::RequestsFailed => "requests_failed",
            Answer::TooShort => "too_short",
            Answer::Failed => "failed",
        }
    }
}

/// A deployment being searched: its seeds' base cells and its bracket.
struct State {
    /// Req/s at a rate scale of 1 (its workload's own rate; 1 for users).
    base: f64,
    cells: Vec<Cell>,
    good: Option<(f64, Vec<Metrics>)>,
    bad: Option<f64>,
    /// Why the `bad` load missed (its worst seed), and that seed's metrics.
    bad_why: Option<(Verdict, Option<Metrics>)>,
    /// A probe that could not run, with its error.
    error: Option<String>,
    probes: usize,
    done: bool,
}

/// One probe run finished: the run, and what it showed on one line
/// (`llama-70b-tp4 @ 12.5 req/s: missed ttft_p99 812 ms > 500 ms`).
#[derive(Debug, Clone)]
pub struct Probe<'a> {
    /// The run.
    pub run: RunFinished<'a>,
    /// The deployment, the load, met or missed with the binding metric.
    pub line: String,
}

/// Runs the search of `plan` (whose `slo` is set to the search's);
/// `on_probe` is called as each probe run finishes.
pub fn search(
    mut plan: Plan,
    search: &Search,
    opts: &SweepOptions,
    on_probe: &mut (dyn FnMut(Probe<'_>) + Send),
) -> Result<Vec<Capacity>, SweepError> {
    plan.slo = Some(search.slo);
    // The rate a rate scale of 1 offers: each deployment's own workload's
    // (a grid over workloads, or a workload override, gives each its own),
    // at the plan's first seed — the load `manifest.json` and the report
    // show for each run.
    let seed = plan.cells.first().map_or(0, |c| c.seed);
    let mut bases: Vec<(Option<usize>, f64)> = Vec::new();
    let mut base_of = |cell: &Cell| -> Result<f64, SweepError> {
        if search.over == Over::Concurrency {
            return Ok(1.0);
        }
        if let Some(&(_, b)) = bases.iter().find(|(w, _)| *w == cell.workload) {
            return Ok(b);
        }
        let b = plan
            .workload_of(cell)
            .base_rate(seed)
            .map_err(|e| SweepError::Io { path: plan.file.display().to_string(), error: std::io::Error::other(e) })?;
        bases.push((cell.workload, b));
        Ok(b)
    };
    // Deployments: the grid's cells by scenario and overrides; each keeps
    // its seeds' cells.
    let mut states: Vec<State> = Vec::new();
    let mut keys: Vec<(String, String)> = Vec::new();
    for cell in &plan.cells {
        let key = (cell.scenario.clone(), serde_json::to_string(&cell.overrides).unwrap_or_default());
        match keys.iter().position(|k| *k == key) {
            Some(i) => states[i].cells.push(cell.clone()),
            None => {
                keys.push(key);
                states.push(State {
                    base: base_of(cell)?,
                    cells: vec![cell.clone()],
                    good: None,
                    bad: None,
                    bad_why: None,
                    error: None,
                    probes: 0,
                    done: false,
                });
            }
        }
    }
    let layout = Layout { root: plan.output.clone() };
    let mut probes: Vec<Cell> = Vec::new();
    loop {
        // Each deployment still searching names its next load.
        let mut round: Vec<(usize, f64, Vec<Cell>)> = Vec::new();
        for (i, s) in states.iter_mut().enumerate() {
            if s.done {
                continue;
            }
            let next = match (&s.good, s.bad) {
                (None, None) if s.probes == 0 => Some(search.range.0),
                (Some((g, _)), None) if *g < search.range.1 => Some(search.range.1),
                (Some((g, _)), Some(b)) if b / g - 1.0 > search.precision => Some(match search.over {
                    Over::Rate => (g * b).sqrt(),
                    Over::Concurrency => ((g + b) / 2.0).floor(),
                }),
                _ => None,
            };
            let Some(load) =
                next.filter(|&l| search.over == Over::Rate || !s.good.as_ref().is_some_and(|(g, _)| l <= *g))
            else {
                s.done = true;
                continue;
            };
            let cells: Vec<Cell> = s
                .cells
                .iter()
                .map(|c| match search.over {
                    Over::Rate => c.probe(0, load / s.base, None),
                    Over::Concurrency => c.probe(0, 1.0, Some(load as u32)),
                })
                .collect();
            round.push((i, load, cells));
        }
        if round.is_empty() {
            break;
        }
        // Grid order is probing order.
        for (_, _, cells) in &mut round {
            for c in cells.iter_mut() {
                c.index = probes.len();
                probes.push(c.clone());
            }
        }
        let mut p = plan.clone();
        p.cells = probes.clone();
        // `--force` redoes every probe once: the first round starts from an
        // empty output, later rounds reuse what this search ran.
        let first = probes.len() == round.iter().map(|r| r.2.len()).sum::<usize>();
        let round_opts =
            SweepOptions { force: opts.force && first, keep_other_runs: !(opts.force && first), ..opts.clone() };
        // A probe that fails is no capacity: keep its error for the row.
        let mut errors: BTreeMap<String, String> = BTreeMap::new();
        // Each probe run's deployment and load, for its line.
        let names: BTreeMap<&str, (String, f64)> = round
            .iter()
            .flat_map(|(i, load, cells)| cells.iter().map(move |c| (c.run_id.as_str(), (*i, *load))))
            .map(|(id, (i, load))| (id, (deployment_name(&states[i].cells[0]), load)))
            .collect();
        executor::run(p, &round_opts, &mut |r: RunFinished<'_>| {
            if let Some(e) = r.error {
                errors.insert(r.run_id.to_owned(), e.to_owned());
            }
            let (name, load) = names.get(r.run_id).cloned().unwrap_or_else(|| (String::new(), 0.0));
            let shown = match r.error {
                Some(e) => format!("failed: {e}"),
                None => read_metrics(&layout, r.run_id)
                    .map_or_else(|| "the run wrote no metrics".to_owned(), |m| probe_outcome(&m, &search.slo)),
            };
            let line = format!("{name} @ {}: {shown}", load_text(load, search.over));
            on_probe(Probe { run: r, line })
        })?;
        for (i, load, cells) in round {
            let s = &mut states[i];
            s.probes += 1;
            let mut metrics = Vec::new();
            let mut miss: Option<(Verdict, Option<Metrics>)> = None;
            for c in &cells {
                let Some(m) = read_metrics(&layout, &c.run_id) else {
                    let why = errors.get(&c.run_id).cloned().unwrap_or_else(|| "the run wrote no metrics".to_owned());
                    s.error = Some(format!("probe at {load}: {why}"));
                    break;
                };
                let verdict = probe_verdict(&m);
                if verdict != Verdict::Met && miss.is_none() {
                    miss = Some((verdict, Some(m.clone())));
                }
                metrics.push(m);
            }
            if s.error.is_some() {
                s.done = true;
                continue;
            }
            match miss {
                None => s.good = Some((load, metrics)),
                Some(why) => {
                    s.bad = Some(load);
                    s.bad_why = Some(why);
                    if s.good.is_none() {
                        s.done = true;
                    }
                }
            }
        }
    }
    Ok(states.into_iter().map(|s| answer(s, search)).collect())
}

/// A deployment as a probe line names it: the scenario, and its grid
/// overrides in brackets (`llama-70b [tp=4, replicas=2]`).
fn deployment_name(cell: &Cell) -> String {
    if cell.overrides.is_empty() {
        return cell.scenario.clone();
    }
    let o: Vec<String> = cell.overrides.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{} [{}]", cell.scenario, o.join(", "))
}

/// A probe's load: `12.5 req/s` (three significant digits) or `32 users`.
fn load_text(load: f64, over: Over) -> String {
    match over {
        Over::Concurrency => format!("{load:.0} users"),
        Over::Rate if load >= 100.0 => format!("{load:.0} req/s"),
        Over::Rate if load >= 10.0 => format!("{load:.1} req/s"),
        Over::Rate if load >= 1.0 => format!("{load:.2} req/s"),
        Over::Rate => format!("{load:.3} req/s"),
    }
}

/// Milliseconds on a line: whole above 10, one decimal below.
fn ms_text(ms: f64) -> String {
    if ms >= 10.0 { format!("{ms:.0} ms") } else { format!("{ms:.1} ms") }
}

/// What one probe run showed: met or missed, with the binding SLO metric
/// (the one closest to, or furthest past, its target) against its target;
/// the load not held or served, or too many failed requests.
fn probe_outcome(m: &Metrics, slo: &crate::metrics::Slo) -> String {
    let w = m.window.as_ref();
    let value = |window: Option<f64>, run: f64| window.unwrap_or(run);
    let metrics = [
        ("ttft_p99", slo.ttft_p99_ms, value(w.map(|w| w.ttft_p99_ms), m.ttft_p99_ms)),
        ("itl_p99", slo.itl_p99_ms, value(w.map(|w| w.itl_p99_ms), m.itl_p99_ms)),
        ("e2e_p99", slo.e2e_p99_ms, value(w.map(|w| w.e2e_p99_ms), m.e2e_p99_ms)),
    ];
    // The window's own binding target (TPOT's included); a run written
    // before windows named one: the largest share of its target.
    let binding = match w.and_then(|w| w.binding.as_ref()) {
        Some(b) => Some((b.metric.trim_end_matches("_ms"), b.target_ms, b.value_ms)),
        None => metrics
            .iter()
            .filter_map(|&(name, target, v)| target.map(|t| (name, t, v)))
            .max_by(|a, b| (a.2 / a.1).total_cmp(&(b.2 / b.1))),
    };
    let bound = |met: bool| {
        binding.map_or_else(String::new, |(name, target, v)| {
            let sign = if v <= target { "≤" } else { ">" };
            let lead = if met { ", binding " } else { " " };
            format!("{lead}{name} {} {sign} {}", ms_text(v), ms_text(target))
        })
    };
    match probe_verdict(m) {
        Verdict::Met => format!("met{}", bound(true)),
        Verdict::Missed => format!("missed{}", bound(false)),
        Verdict::Overloaded => w.map_or_else(
            || "missed: overloaded".to_owned(),
            |w| format!("missed: overloaded, served {:.2} of {:.2} req/s", w.throughput_rps, w.offered_rps),
        ),
        Verdict::RequestsFailed => w.map_or_else(
            || "missed: too many requests failed".to_owned(),
            |w| format!("missed: {} of {} requests failed", w.failed, w.requests),
        ),
        Verdict::TooShort => w.map_or_else(
            || "too short to show this load".to_owned(),
            |w| format!("too short: a window of {:.1} s for a mean E2E of {}", w.duration_s, ms_text(w.e2e_mean_ms)),
        ),
    }
}

/// A probe run's verdict: its window's (a run written without one judged by
/// `slo_met` alone).
fn probe_verdict(m: &Metrics) -> Verdict {
    match (m.window.as_ref().and_then(|w| w.verdict), m.slo_met) {
        (Some(v), _) => v,
        (None, Some(true)) => Verdict::Met,
        (None, _) => Verdict::Missed,
    }
}

/// The TTFT p99 a probe is compared by: its window's.
fn ttft_p99(m: &Metrics) -> f64 {
    m.window.as_ref().map_or(m.ttft_p99_ms, |w| w.ttft_p99_ms)
}

/// How hard a probe run presses on its SLO: its binding target's value /
/// target ([`crate::metrics::Binding`]), which its window names.
fn pressure(m: &Metrics) -> Option<f64> {
    m.window.as_ref()?.binding.as_ref().map(|b| b.value_ms / b.target_ms)
}

/// The worst seed of a load's runs: the one that presses hardest on the
/// binding target (any of the SLO's, TPOT's included); runs written before
/// windows named it, the one with the highest p99 TTFT.
fn worst_seed(ms: Vec<Metrics>) -> Option<Metrics> {
    if ms.iter().all(|m| pressure(m).is_some()) {
        ms.into_iter().max_by(|a, b| pressure(a).unwrap_or(0.0).total_cmp(&pressure(b).unwrap_or(0.0)))
    } else {
        ms.into_iter().max_by(|a, b| ttft_p99(a).total_cmp(&ttft_p99(b)))
    }
}

fn read_metrics(layout: &Layout, run_id: &str) -> Option<Metrics> {
    let text = std::fs::read_to_string(layout.run_dir(run_id).join("metrics.json")).ok()?;
    serde_json::from_str(&text).ok()
}

fn answer(s: State, search: &Search) -> Capacity {
    let cell = &s.cells[0];
    let d = crate::scenario::resolve(cell.spec.clone(), &cell.base, &cell.scenario).ok();
    let gpus = d.as_ref().map_or(0, Deployment::gpus);
    let gpu = d.as_ref().map_or(String::new(), |d| d.serving().gpu.name.to_owned());
    let pooled = cell.spec.pools.is_some();
    let pools = d.as_ref().filter(|_| pooled).map(|d| pools_text(&d.pools));
    let layout = d.as_ref().map_or_else(
        || "-".to_owned(),
        |d| layout(d.serving().replicas, d.serving().dp, d.serving().tp, d.serving().gpu.name),
    );
    let disaggregated = d.as_ref().is_some_and(|d| d.pools.iter().any(|p| p.role == Role::Prefill));
    // The worst seed: the one closest to (or past) the binding target.
    let (mut max, mut metrics) = match s.good {
        Some((load, ms)) => (Some(load), worst_seed(ms)),
        None => (None, None),
    };
    let at_least = max.is_some() && s.bad.is_none() && s.error.is_none();
    let (answer, note) = match (&s.error, &s.bad_why, max) {
        (Some(e), _, _) => {
            // A failed probe is not a capacity, whatever the others said.
            max = None;
            metrics = None;
            (Answer::Failed, Some(e.clone()))
        }
        (None, Some((Verdict::TooShort, m)), _) => {
            let load = s.bad.unwrap_or(search.range.0);
            let w = m.as_ref().and_then(|m| m.window.as_ref());
            let why = w.map_or_else(String::new, |w| {
                format!(
                    ": its measurement window lasts {:.2} s, {} requests, for a mean E2E of {:.0} ms",
                    w.duration_s, w.requests, w.e2e_mean_ms
                )
            });
            (Answer::TooShort, Some(format!("the workload is too short to show {load:.3}{why}")))
        }
        (None, Some((Verdict::RequestsFailed, m)), None) => {
            let note = m.as_ref().map(|m| {
                let w = m.window.as_ref();
                let (failed, n) = w.map_or((0, 0), |w| (w.failed, w.requests));
                format!(
                    "{failed} of {n} requests failed at {} ({:.1} %: {} unservable, {} rejected, {} timed out, {} unfinished); \
                     the SLO allows {:.1} %",
                    search.range.0,
                    if n > 0 { failed as f64 * 100.0 / n as f64 } else { 0.0 },
                    m.dropped_unservable,
                    m.rejected_requests,
                    m.timed_out_requests,
                    m.still_unfinished,
                    100.0 - search.slo.at(),
                )
            });
            (Answer::RequestsFailed, note)
        }
        (None, _, None) => (Answer::BelowRange, None),
        (None, _, Some(_)) if at_least => (Answer::AtLeast, None),
        (None, _, Some(_)) => (Answer::Capacity, None),
    };
    let hourly = d.as_ref().map(|d| hourly_cost(&d.pools, &search.gpu_hour_usd));
    // Some pools priced, others not: no cost (a part would understate it),
    // and the note says which price is missing.
    let note = match &hourly {
        Some(Err(Unpriced { missing, priced: true })) => {
            let why = format!("no cost: search.gpu_hour_usd has no price for {}", missing.join(", "));
            Some(note.map_or(why.clone(), |n| format!("{n}; {why}")))
        }
        _ => note,
    };
    let cost_per_mtok = match (&metrics, hourly) {
        (Some(m), Some(Ok(usd_per_hour))) if m.tokens_per_sec > 0.0 => {
            Some(usd_per_hour / 3600.0 / m.tokens_per_sec * 1e6)
        }
        _ => None,
    };
    Capacity {
        scenario: cell.scenario.clone(),
        overrides: cell.overrides.clone(),
        gpus,
        gpu,
        pools,
        layout,
        disaggregated,
        deployment: match &d {
            Some(d) => DeploymentRow::of(d),
            None => DeploymentRow::from_spec(&cell.spec),
        },
        max,
        at_least,
        metrics,
        cost_per_mtok,
        probes: s.probes,
        answer,
        note,
    }
}

/// Pools whose GPU has no `gpu_hour_usd`.
#[derive(Debug, Clone, PartialEq)]
pub struct Unpriced {
    /// The GPU names without a price, as the catalog names them.
    pub missing: Vec<String>,
    /// Whether some other pool's GPU has one.
    pub priced: bool,
}

/// What a deployment's GPUs cost an hour, USD: over its pools, each pool's
/// GPUs at its own GPU's price (H100 and H200 pools each at theirs).
pub fn hourly_cost(pools: &[Pool], gpu_hour_usd: &BTreeMap<String, f64>) -> Result<f64, Unpriced> {
    let mut missing: Vec<String> = Vec::new();
    let mut usd = 0.0;
    for p in pools {
        match gpu_hour_usd.get(p.gpu.name) {
            Some(price) => usd += price * p.gpus() as f64,
            None if !missing.iter().any(|m| m == p.gpu.name) => missing.push(p.gpu.name.to_owned()),
            None => {}
        }
    }
    if missing.is_empty() {
        Ok(usd)
    } else {
        let priced = pools.iter().any(|p| gpu_hour_usd.contains_key(p.gpu.name));
        Err(Unpriced { missing, priced })
    }
}

/// A deployment's pools as its row says them: `prefill 1×TP4 H100 +
/// decode 2×TP4 H100` (a pool named other than its role says the role:
/// `fast (mixed) 2×TP2 H200`; data-parallel ranks as `DP2×`). In the order
/// a request meets them, mixed and prefill pools before decode ones (a
/// plan's scenarios reach here through JSON, which keeps no key order).
pub fn pools_text(pools: &[Pool]) -> String {
    let mut ordered: Vec<&Pool> = pools.iter().collect();
    ordered.sort_by_key(|p| p.role == Role::Decode);
    ordered
        .iter()
        .map(|p| {
            let role = if p.name == p.role.name() { String::new() } else { format!(" ({})", p.role.name()) };
            format!("{}{role} {}", p.name, layout(p.replicas, p.dp, p.tp, p.gpu.name))
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

/// `2×TP4 H100`: replicas, data-parallel ranks (when more than one), TP
/// and GPU.
pub(crate) fn layout(replicas: u32, dp: u32, tp: u64, gpu: &str) -> String {
    let dp = if dp > 1 { format!("DP{dp}×") } else { String::new() };
    format!("{}×{dp}TP{tp} {gpu}", replicas.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(yaml: &str) -> Deployment {
        let spec: crate::scenario::ScenarioSpec = crate::yaml::parse(yaml).unwrap();
        crate::scenario::resolve(spec, std::path::Path::new("."), "t").unwrap()
    }

    #[test]
    fn the_worst_seed_is_the_one_pressing_hardest_on_its_binding_target() {
        let seed = |ttft: f64, metric: &str, value_ms: f64, target_ms: f64| Metrics {
            ttft_p99_ms: ttft,
            window: Some(crate::metrics::WindowMetrics {
                ttft_p99_ms: ttft,
                binding: Some(crate::metrics::Binding { metric: metric.to_owned(), value_ms, target_ms }),
                ..Default::default()
            }),
            ..Metrics::default()
        };
        // TTFT at 90 % of its target against TPOT at 99 % of its: the TPOT one,
        // though its TTFT is lower.
        let worst = worst_seed(vec![seed(900.0, "ttft_p99_ms", 900.0, 1000.0), seed(200.0, "tpot_p99_ms", 49.5, 50.0)]);
        assert_eq!(worst.unwrap().ttft_p99_ms, 200.0);
        // A run written before windows named a binding target: the highest TTFT.
        let mut old = seed(300.0, "", 0.0, 1.0);
        old.window.as_mut().unwrap().binding = None;
        let worst = worst_seed(vec![seed(200.0, "tpot_p99_ms", 49.5, 50.0), old]);
        assert_eq!(worst.unwrap().ttft_p99_ms, 300.0);
    }

    #[test]
    fn heterogeneous_pools_cost_each_pool_at_its_own_gpus_price() {
        // 1 replica × TP2 on H100 (2 GPUs) + 3 replicas × TP1 on H200 (3 GPUs).
        let d = deployment(
            "model: Llama-3.1-8B\nhardware: H100\npools:\n  \
             a: {role: mixed, tp: 2}\n  b: {role: mixed, hardware: H200, tp: 1, replicas: 3}\n",
        );
        assert_eq!(d.gpus(), 5);
        let prices: BTreeMap<String, f64> = [("H100".to_owned(), 2.5), ("H200".to_owned(), 3.5)].into();
        assert_eq!(hourly_cost(&d.pools, &prices), Ok(2.0 * 2.5 + 3.0 * 3.5));
        assert_eq!(pools_text(&d.pools), "a (mixed) 1×TP2 H100 + b (mixed) 3×TP1 H200");
        // One pool unpriced: no cost, and which GPU lacks a price.
        let h100_only: BTreeMap<String, f64> = [("H100".to_owned(), 2.5)].into();
        assert_eq!(hourly_cost(&d.pools, &h100_only), Err(Unpriced { missing: vec!["H200".to_owned()], priced: true }));
        assert_eq!(
            hourly_cost(&d.pools, &BTreeMap::new()),
            Err(Unpriced { missing: vec!["H100".to_owned(), "H200".to_owned()], priced: false })
        );
    }

    #[test]
    fn a_deployment_without_pools_costs_as_before() {
        let d = deployment("model: Llama-3.1-8B\nhardware: H100\ntp: 2\nreplicas: 3\n");
        let prices: BTreeMap<String, f64> = [("H100".to_owned(), 2.5)].into();
        assert_eq!(hourly_cost(&d.pools, &prices), Ok(2.5 * 6.0));
        assert_eq!(pools_text(&d.pools), "default (mixed) 3×TP2 H100");
    }
}
