//! The report's answer: `capacity.parquet`'s rows, the cheapest deployment
//! meeting the target first, each with its cost per million output tokens
//! and the SLO metric with the least room (its margin); a sentence naming
//! the answer, the table, and the capacities as bars with the target.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::charts::capacity_bars;
use super::page::{chart, escape};
use super::sig3;
use crate::metrics::Slo;

/// The SLO metric with the least room at a capacity: its name, value,
/// target and margin (1 − value / target).
#[derive(Debug, Clone, serde::Serialize)]
struct Binding {
    metric: &'static str,
    value_ms: f64,
    target_ms: f64,
    margin: f64,
}

/// A row of `capacity.parquet`, as the report shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct CapacityRow {
    deployment: String,
    scenario: String,
    overrides: Value,
    gpus: Option<i64>,
    /// `req/s` or `users`.
    unit: &'static str,
    max: Option<f64>,
    at_least: bool,
    verdict: String,
    meets_target: Option<bool>,
    cost_per_mtok: Option<f64>,
    /// GPU-hours per million output tokens at the capacity: the cost
    /// without a price.
    gpu_hours_per_mtok: Option<f64>,
    tokens_per_sec: Option<f64>,
    binding: Option<Binding>,
    /// The cheapest deployment meeting the target (fewest GPUs, then the
    /// lowest cost: the rule `blis-sweep capacity` prints).
    cheapest: bool,
}

impl CapacityRow {
    /// Its capacity is only a lower bound: the high end met the SLO, or the
    /// workload was too short to show more.
    fn lower_bound(&self) -> bool {
        self.at_least || self.verdict == "too_short"
    }
}

/// The capacity rows, the cheapest meeting the target first, then the
/// others meeting it, then the rest (each by GPUs, then cost).
pub(super) fn rows(rows: &[BTreeMap<String, Value>], slo: Option<&Slo>, target: Option<f64>) -> Vec<CapacityRow> {
    let mut out: Vec<CapacityRow> = rows
        .iter()
        .map(|r| {
            // A column the table lacks reads as null (a table from elsewhere).
            let r = |k: &str| r.get(k).unwrap_or(&Value::Null);
            let overrides = r("overrides").as_str().and_then(|o| serde_json::from_str::<Value>(o).ok());
            let deployment = super::points::deployment(
                r("scenario").as_str().unwrap_or_default(),
                overrides.as_ref().unwrap_or(&Value::Null),
            );
            let users = r("max_concurrency").as_f64().is_some()
                || rows.first().is_some_and(|r| r.contains_key("max_concurrency"));
            let gpus = r("gpus").as_i64();
            let tokens = r("tokens_per_sec").as_f64();
            let targets = [
                ("TTFT p99", "ttft_p99_ms", slo.and_then(|s| s.ttft_p99_ms)),
                ("ITL p99", "itl_p99_ms", slo.and_then(|s| s.itl_p99_ms)),
                ("TPOT p99", "tpot_p99_ms", slo.and_then(|s| s.tpot_p99_ms)),
                ("E2E p99", "e2e_p99_ms", slo.and_then(|s| s.e2e_p99_ms)),
            ];
            let binding = targets
                .iter()
                .filter_map(|&(metric, col, t)| {
                    let (v, t) = (r(col).as_f64()?, t?);
                    Some(Binding { metric, value_ms: v, target_ms: t, margin: 1.0 - v / t })
                })
                .min_by(|a, b| a.margin.total_cmp(&b.margin));
            CapacityRow {
                deployment,
                scenario: r("scenario").as_str().unwrap_or_default().to_owned(),
                overrides: overrides.unwrap_or(Value::Null),
                gpus,
                unit: if users { "users" } else { "req/s" },
                max: r(if users { "max_concurrency" } else { "max_rate" }).as_f64(),
                at_least: r("at_least").as_bool() == Some(true),
                // The search's verdict (capacity.parquet from before it had one: none).
                verdict: r("verdict").as_str().unwrap_or("capacity").to_owned(),
                meets_target: r("meets_target").as_bool(),
                cost_per_mtok: r("cost_per_mtok").as_f64(),
                gpu_hours_per_mtok: gpus.zip(tokens.filter(|&t| t > 0.0)).map(|(g, t)| g as f64 / t / 3600.0 * 1e6),
                tokens_per_sec: tokens,
                binding: binding.filter(|_| r(if users { "max_concurrency" } else { "max_rate" }).as_f64().is_some()),
                cheapest: false,
            }
        })
        .collect();
    let order = |a: &CapacityRow, b: &CapacityRow| {
        let rank = |r: &CapacityRow| match (r.meets_target, r.max) {
            (Some(true), _) => 0,
            (None, Some(_)) => 1,
            _ => 2,
        };
        rank(a)
            .cmp(&rank(b))
            .then(a.gpus.unwrap_or(i64::MAX).cmp(&b.gpus.unwrap_or(i64::MAX)))
            .then(a.cost_per_mtok.unwrap_or(f64::MAX).total_cmp(&b.cost_per_mtok.unwrap_or(f64::MAX)))
    };
    out.sort_by(order);
    if target.is_some()
        && let Some(first) = out.first_mut()
        && first.meets_target == Some(true)
    {
        first.cheapest = true;
    }
    out
}

/// The answer: a sentence naming the cheapest deployment meeting the
/// target, the table, and the capacities as bars with the target's line.
pub(super) fn section(rows: &[CapacityRow], target: Option<f64>, html: &mut String) {
    let unit = rows.first().map_or("req/s", |r| r.unit);
    html.push_str("<h2>Capacity: the answer</h2>");
    let priced = rows.iter().any(|r| r.cost_per_mtok.is_some());
    let cost = |r: &CapacityRow| match (r.cost_per_mtok, r.gpu_hours_per_mtok) {
        (Some(c), _) => format!("${c:.2} per million output tokens"),
        (None, Some(h)) => format!("{} GPU-hours per million output tokens", sig3(h)),
        _ => "no cost".to_owned(),
    };
    let margin = |b: &Binding| {
        format!("{} {:.1} ms of {} ms ({:.0} % margin)", b.metric, b.value_ms, b.target_ms, b.margin * 100.0)
    };
    match (target, rows.iter().find(|r| r.cheapest)) {
        (Some(t), Some(r)) => {
            let _ = write!(
                html,
                "<p class=\"answer\"><b>{}</b> serves {t} {unit}: {} GPU{}, {}; capacity {}{} {unit}; binding: {}.</p>",
                escape(&r.deployment),
                r.gpus.unwrap_or(0),
                if r.gpus == Some(1) { "" } else { "s" },
                cost(r),
                if r.lower_bound() { "≥ " } else { "" },
                r.max.map_or_else(|| "–".to_owned(), sig3),
                r.binding.as_ref().map_or_else(|| "–".to_owned(), margin)
            );
        }
        (Some(t), None) => {
            let _ = write!(html, "<p class=\"answer\"><b>No deployment serves {t} {unit}</b> within the SLO.</p>");
        }
        (None, _) => {}
    }
    let _ = write!(
        html,
        "<p>A deployment's capacity is the highest load at which every seed met the SLO (the worst seed decides); \
         its latencies and cost are its worst seed's there.</p><table id=\"capacity\"><tr><th>deployment</th><th>GPUs</th>\
         <th>capacity {unit}</th><th>{}</th><th>binding SLO metric</th><th>margin</th><th>verdict</th></tr>",
        if priced { "$ / M output tokens" } else { "GPU-hours / M output tokens" }
    );
    for r in rows {
        let value = if priced { r.cost_per_mtok } else { r.gpu_hours_per_mtok };
        let _ = write!(
            html,
            "<tr{}><td class=\"l\">{}{}</td><td>{}</td><td>{}{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td></tr>",
            if r.cheapest { " style=\"font-weight:bold\"" } else { "" },
            escape(&r.deployment),
            if r.cheapest { " (cheapest)" } else { "" },
            r.gpus.map_or_else(|| "–".to_owned(), |g| g.to_string()),
            if r.lower_bound() { "≥ " } else { "" },
            r.max.map_or_else(|| "–".to_owned(), sig3),
            value.map_or_else(|| "–".to_owned(), |v| if priced { format!("{v:.2}") } else { sig3(v) }),
            r.binding
                .as_ref()
                .map_or_else(|| "–".to_owned(), |b| format!("{} {:.1} / {} ms", b.metric, b.value_ms, b.target_ms)),
            r.binding.as_ref().map_or_else(|| "–".to_owned(), |b| format!("{:.0} %", b.margin * 100.0)),
            escape(&r.verdict),
        );
    }
    html.push_str("</table>");
    let bars: Vec<Value> = rows
        .iter()
        .map(|r| {
            let label = match (r.max, r.verdict.as_str()) {
                (Some(m), "too_short") => format!("≥ {} (workload too short for more)", sig3(m)),
                (Some(m), _) => {
                    format!("{}{} {unit} · {} GPUs", if r.at_least { "≥ " } else { "" }, sig3(m), r.gpus.unwrap_or(0))
                }
                (None, "failed") => "failed: a probe could not run".to_owned(),
                (None, "requests_failed") => "no load: too many requests fail".to_owned(),
                (None, "too_short") => "workload too short".to_owned(),
                (None, _) => "below the range".to_owned(),
            };
            let verdict = match r.meets_target {
                Some(true) => "meets the target".to_owned(),
                Some(false) => "below the target".to_owned(),
                None => r.verdict.replace('_', " "),
            };
            serde_json::json!({"deployment": r.deployment, "capacity": r.max.unwrap_or(0.0), "label": label,
                               "verdict": verdict})
        })
        .collect();
    html.push_str(&chart("capacity-bars", &capacity_bars(unit, target, bars)));
}
