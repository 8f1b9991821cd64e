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

use std::collections::BTreeMap;

use crate::metrics::{Metrics, Verdict};
use crate::sweep::error::SweepError;
use crate::sweep::executor::{self, RunFinished, SweepOptions};
use crate::sweep::grid::{Cell, Plan};
use crate::sweep::output_dir::Layout;
use crate::sweep::plan::{Over, Search};
use crate::sweep::tables::{DeploymentRow, RowsBuilder, overrides_field, overrides_json};

/// One deployment's answer.
#[derive(Debug, Clone)]
pub struct Capacity {
    /// Scenario name.
    pub scenario: String,
    /// Its grid overrides.
    pub overrides: Vec<(String, serde_json::Value)>,
    /// GPUs: tp × dp × replicas.
    pub gpus: u64,
    /// The GPU's name.
    pub gpu: String,
    /// The deployment as the tables' columns.
    pub(crate) deployment: DeploymentRow,
    /// The highest load that met the SLO (`None`: not even the low end).
    pub max: Option<f64>,
    /// Whether the high end met it too (the capacity is at least `max`).
    pub at_least: bool,
    /// The worst seed's metrics at `max`.
    pub metrics: Option<Metrics>,
    /// Cost per million output tokens at `max`, when the GPU has a price.
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

/// The workload's own rate, requests per second.
fn base_rate(plan: &Plan, seed: u64) -> Result<f64, String> {
    let requests = plan.workload.requests(seed).map_err(|e| match e {
        crate::sweep::source::OpenError::File(path, e) => format!("{}: {e}", path.display()),
        crate::sweep::source::OpenError::Import(e) => e.to_string(),
    })?;
    let (mut n, mut first, mut last) = (0u64, u64::MAX, 0u64);
    for r in requests {
        let t = r?.arrival_us();
        first = first.min(t);
        last = last.max(t);
        n += 1;
    }
    if n < 2 || last == first {
        return Err("a rate search needs a workload whose arrivals span some time (two or more requests)".to_owned());
    }
    Ok((n - 1) as f64 / ((last - first) as f64 / 1e6))
}

/// Runs the search of `plan` (whose `slo` is set to the search's).
pub fn search(
    mut plan: Plan,
    search: &Search,
    opts: &SweepOptions,
    on_run: &mut (dyn FnMut(RunFinished<'_>) + Send),
) -> Result<Vec<Capacity>, SweepError> {
    plan.slo = Some(search.slo);
    let base = match search.over {
        Over::Rate => {
            let seed = plan.cells.first().map_or(0, |c| c.seed);
            base_rate(&plan, seed).map_err(|e| SweepError::Io {
                path: plan.file.display().to_string(),
                error: std::io::Error::other(e),
            })?
        }
        Over::Concurrency => 1.0,
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
                    Over::Rate => c.probe(0, load / base, None),
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
        executor::run(p, &round_opts, &mut |r: RunFinished<'_>| {
            if let Some(e) = r.error {
                errors.insert(r.run_id.to_owned(), e.to_owned());
            }
            on_run(r)
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

fn read_metrics(layout: &Layout, run_id: &str) -> Option<Metrics> {
    let text = std::fs::read_to_string(layout.run_dir(run_id).join("metrics.json")).ok()?;
    serde_json::from_str(&text).ok()
}

fn answer(s: State, search: &Search) -> Capacity {
    let cell = &s.cells[0];
    let d = crate::scenario::resolve(cell.spec.clone(), &cell.base, &cell.scenario).ok();
    let gpus = d.as_ref().map_or(0, crate::scenario::Deployment::gpus);
    let gpu = d.as_ref().map_or(String::new(), |d| d.gpu.name.to_owned());
    // The worst seed: the one with the highest p99 TTFT.
    let (mut max, mut metrics) = match s.good {
        Some((load, ms)) => {
            let worst = ms.into_iter().max_by(|a, b| ttft_p99(a).total_cmp(&ttft_p99(b)));
            (Some(load), worst)
        }
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
    let cost_per_mtok = match (&metrics, search.gpu_hour_usd.get(&gpu)) {
        (Some(m), Some(price)) if m.tokens_per_sec > 0.0 => Some(price * gpus as f64 / 3600.0 / m.tokens_per_sec * 1e6),
        _ => None,
    };
    Capacity {
        scenario: cell.scenario.clone(),
        overrides: cell.overrides.clone(),
        gpus,
        gpu,
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

/// Writes `capacity.parquet` (one row per deployment) under the plan's
/// output and returns the table to print.
pub fn write(plan: &Plan, search: &Search, rows: &[Capacity]) -> Result<String, SweepError> {
    use std::sync::Arc;

    use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
    use arrow_array::{ArrayRef, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    use parquet::arrow::ArrowWriter;

    let load = match search.over {
        Over::Rate => "max_rate",
        Over::Concurrency => "max_concurrency",
    };
    // The deployment's columns and the overrides as in every other table.
    let mut fields = vec![Field::new("scenario", DataType::Utf8, false)];
    fields.extend(DeploymentRow::fields());
    fields.push(overrides_field());
    fields.extend([Field::new(load, DataType::Float64, true), Field::new("at_least", DataType::Boolean, false)]);
    let metric_names =
        ["ttft_p99_ms", "itl_p99_ms", "e2e_p99_ms", "slo_attainment", "goodput_rps", "tokens_per_sec", "cost_per_mtok"];
    fields.extend(metric_names.iter().map(|n| Field::new(*n, DataType::Float64, true)));
    fields.push(Field::new("probes", DataType::Int64, false));
    fields.push(Field::new("meets_target", DataType::Boolean, true));
    fields.push(Field::new("verdict", DataType::Utf8, false));
    fields.push(Field::new("note", DataType::Utf8, true));
    let schema = Arc::new(Schema::new(fields));
    let mut scenario = StringBuilder::new();
    let mut deployments = RowsBuilder::deployments();
    let mut overrides = Vec::new();
    let (mut max, mut at_least) = (Float64Builder::new(), BooleanBuilder::new());
    let mut metrics: Vec<Float64Builder> = metric_names.iter().map(|_| Float64Builder::new()).collect();
    let mut probes = Int64Builder::new();
    let mut meets = BooleanBuilder::new();
    let (mut verdict, mut note) = (StringBuilder::new(), StringBuilder::new());
    let reaches = |r: &Capacity| search.target.map(|t| r.max.is_some_and(|m| m >= t));
    let mut text = String::new();
    let heading = match search.over {
        Over::Rate => "max req/s",
        Over::Concurrency => "max users",
    };
    text.push_str(&format!(
        "{:<32} {:>5} {:>12} {:>10} {:>10} {:>10} {:>12}  {}\n",
        "deployment", "GPUs", heading, "TTFT p99", "ITL p99", "goodput", "$/M tokens", "verdict"
    ));
    let mut notes = String::new();
    for r in rows {
        scenario.append_value(&r.scenario);
        deployments.push_deployment(&r.deployment);
        overrides.push(overrides_json(&r.overrides));
        max.append_option(r.max);
        at_least.append_value(r.at_least);
        let m = r.metrics.as_ref();
        // The latencies of the measurement window (warm-up and drain left out).
        let w = |f: fn(&crate::metrics::WindowMetrics) -> f64, all: fn(&Metrics) -> f64| {
            m.map(|m| m.window.as_ref().map_or_else(|| all(m), f))
        };
        let (ttft, itl, e2e) = (
            w(|w| w.ttft_p99_ms, |m| m.ttft_p99_ms),
            w(|w| w.itl_p99_ms, |m| m.itl_p99_ms),
            w(|w| w.e2e_p99_ms, |m| m.e2e_p99_ms),
        );
        let values = [
            ttft,
            itl,
            e2e,
            m.and_then(|m| m.slo_attainment),
            m.and_then(|m| m.goodput_rps),
            m.map(|m| m.tokens_per_sec),
            r.cost_per_mtok,
        ];
        for (b, v) in metrics.iter_mut().zip(values) {
            b.append_option(v);
        }
        probes.append_value(r.probes as i64);
        meets.append_option(reaches(r));
        verdict.append_value(r.answer.name());
        note.append_option(r.note.as_deref());
        let name = std::iter::once(r.scenario.clone())
            .chain(r.overrides.iter().map(|(k, v)| format!("{k}={v}")))
            .collect::<Vec<_>>()
            .join(" ");
        let load = match (r.answer, r.max, r.at_least) {
            (Answer::BelowRange, ..) => format!("< {}", search.range.0),
            (_, None, _) => "-".to_owned(),
            (_, Some(v), true) => format!(">= {v:.3}"),
            (_, Some(v), false) => format!("{v:.3}"),
        };
        if let Some(n) = &r.note {
            notes.push_str(&format!("{name}: {}: {n}\n", r.answer.name()));
        }
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1} ms"));
        text.push_str(&format!(
            "{name:<32} {:>5} {load:>12} {:>10} {:>10} {:>10} {:>12}  {}\n",
            r.gpus,
            ms(ttft),
            ms(itl),
            m.and_then(|m| m.goodput_rps).map_or_else(|| "-".to_owned(), |g| format!("{g:.2}/s")),
            r.cost_per_mtok.map_or_else(|| "-".to_owned(), |c| format!("{c:.3}")),
            r.answer.name(),
        ));
    }
    text.push_str(&notes);
    let mut columns: Vec<ArrayRef> = vec![Arc::new(scenario.finish())];
    columns.extend(deployments.finish());
    let overrides: arrow_array::DictionaryArray<arrow_array::types::Int32Type> =
        overrides.iter().map(String::as_str).collect();
    columns.push(Arc::new(overrides));
    columns.push(Arc::new(max.finish()));
    columns.push(Arc::new(at_least.finish()));
    columns.extend(metrics.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
    columns.push(Arc::new(probes.finish()));
    columns.push(Arc::new(meets.finish()));
    columns.push(Arc::new(verdict.finish()));
    columns.push(Arc::new(note.finish()));
    if let Some(t) = search.target {
        let cheapest = rows.iter().filter(|r| reaches(r) == Some(true)).min_by(|a, b| {
            a.gpus
                .cmp(&b.gpus)
                .then(a.cost_per_mtok.unwrap_or(f64::MAX).total_cmp(&b.cost_per_mtok.unwrap_or(f64::MAX)))
        });
        text.push_str(&match cheapest {
            Some(r) => format!(
                "cheapest for {t}: {}{} ({} GPUs{})\n",
                r.scenario,
                r.overrides.iter().map(|(k, v)| format!(" {k}={v}")).collect::<String>(),
                r.gpus,
                r.cost_per_mtok.map_or_else(String::new, |c| format!(", {c:.3} $/M tokens"))
            ),
            None => format!("no deployment reaches {t}\n"),
        });
    }
    let batch = RecordBatch::try_new(schema.clone(), columns).expect("columns match the schema");
    let path = plan.output.join("capacity.parquet");
    let file = crate::sweep::output_dir::TmpFile::create(&path)?;
    let tmp = file.tmp().to_owned();
    let err = |e: parquet::errors::ParquetError| SweepError::Io {
        path: tmp.display().to_string(),
        error: std::io::Error::other(e),
    };
    let mut writer = ArrowWriter::try_new(file, schema.clone(), Some(crate::sweep::tables::writer_properties(&schema)))
        .map_err(err)?;
    writer.write(&batch).map_err(err)?;
    writer.into_inner().map_err(err)?.commit()?;
    Ok(text)
}
