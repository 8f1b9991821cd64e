//! The capacity search's outputs: `capacity.parquet` (one row per
//! deployment) and the table `blis-sweep capacity` prints, which ends, when
//! the deployments hold both aggregated and disaggregated ones, with the
//! best of each at the same GPU count ([`agg_vs_disagg`]).
//!
//! A plan without a pooled deployment writes both exactly as before pools
//! existed: the `pools` column (Parquet and printed) appears only when some
//! deployment has `pools:`. The printed `TPOT p99` column appears only when
//! the SLO targets TPOT; the Parquet table always has `tpot_p99_ms` (null
//! from a probe written before windows reported it) and the worst seed's
//! binding target, `binding_metric` and `binding_margin` (1 − value /
//! target at the verdict's percentile, see [`crate::metrics::Binding`]).

use std::collections::BTreeMap;

use super::{Answer, Capacity};
use crate::metrics::Metrics;
use crate::sweep::error::SweepError;
use crate::sweep::grid::Plan;
use crate::sweep::plan::{Over, Search};
use crate::sweep::tables::{DeploymentRow, RowsBuilder, overrides_field, overrides_json};

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
    // Only a plan with pools has the column: other plans' tables stay as
    // they were.
    let with_pools = rows.iter().any(|r| r.pools.is_some());
    if with_pools {
        fields.push(Field::new("pools", DataType::Utf8, true));
    }
    fields.push(overrides_field());
    fields.extend([Field::new(load, DataType::Float64, true), Field::new("at_least", DataType::Boolean, false)]);
    let metric_names = [
        "ttft_p99_ms",
        "itl_p99_ms",
        "tpot_p99_ms",
        "e2e_p99_ms",
        "slo_attainment",
        "goodput_rps",
        "tokens_per_sec",
        "cost_per_mtok",
    ];
    fields.extend(metric_names.iter().map(|n| Field::new(*n, DataType::Float64, true)));
    fields.push(Field::new("binding_metric", DataType::Utf8, true));
    fields.push(Field::new("binding_margin", DataType::Float64, true));
    fields.push(Field::new("probes", DataType::Int64, false));
    fields.push(Field::new("meets_target", DataType::Boolean, true));
    fields.push(Field::new("verdict", DataType::Utf8, false));
    fields.push(Field::new("note", DataType::Utf8, true));
    let schema = Arc::new(Schema::new(fields));
    let mut scenario = StringBuilder::new();
    let mut deployments = RowsBuilder::deployments();
    let mut pools = StringBuilder::new();
    let mut overrides = Vec::new();
    let (mut max, mut at_least) = (Float64Builder::new(), BooleanBuilder::new());
    let mut metrics: Vec<Float64Builder> = metric_names.iter().map(|_| Float64Builder::new()).collect();
    let (mut binding, mut margin) = (StringBuilder::new(), Float64Builder::new());
    let mut probes = Int64Builder::new();
    let mut meets = BooleanBuilder::new();
    let (mut verdict, mut note) = (StringBuilder::new(), StringBuilder::new());
    let reaches = |r: &Capacity| search.target.map(|t| r.max.is_some_and(|m| m >= t));
    let mut text = String::new();
    let heading = match search.over {
        Over::Rate => "max req/s",
        Over::Concurrency => "max users",
    };
    let verdict_column = |v: &str| if with_pools { format!("{v:<15}  ") } else { v.to_owned() };
    // Only an SLO with a TPOT target prints TPOT: other tables stay as they were.
    let with_tpot = search.slo.tpot_p99_ms.is_some();
    let tpot_column = |v: &str| if with_tpot { format!(" {v:>10}") } else { String::new() };
    text.push_str(&format!(
        "{:<32} {:>5} {:>12} {:>10} {:>10}{} {:>10} {:>12}  {}{}\n",
        "deployment",
        "GPUs",
        heading,
        "TTFT p99",
        "ITL p99",
        tpot_column("TPOT p99"),
        "goodput",
        "$/M tokens",
        verdict_column("verdict"),
        if with_pools { "pools" } else { "" }
    ));
    let mut notes = String::new();
    for r in rows {
        scenario.append_value(&r.scenario);
        deployments.push_deployment(&r.deployment);
        pools.append_option(r.pools.as_deref());
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
        // The window's; a window written before it had TPOT: unknown (the
        // whole run's would count warm-up and drain).
        let tpot = m.and_then(|m| m.window.as_ref().map_or(Some(m.tpot_p99_ms), |w| w.tpot_p99_ms));
        let values = [
            ttft,
            itl,
            tpot,
            e2e,
            m.and_then(|m| m.slo_attainment),
            m.and_then(|m| m.goodput_rps),
            m.map(|m| m.tokens_per_sec),
            r.cost_per_mtok,
        ];
        for (b, v) in metrics.iter_mut().zip(values) {
            b.append_option(v);
        }
        let bound = m.and_then(|m| m.window.as_ref()?.binding.as_ref());
        binding.append_option(bound.map(|b| b.metric.as_str()));
        margin.append_option(bound.map(crate::metrics::Binding::margin));
        probes.append_value(r.probes as i64);
        meets.append_option(reaches(r));
        verdict.append_value(r.answer.name());
        note.append_option(r.note.as_deref());
        let name = name(r);
        let load = load_text(r, search);
        if let Some(n) = &r.note {
            notes.push_str(&format!("{name}: {}: {n}\n", r.answer.name()));
        }
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1} ms"));
        text.push_str(&format!(
            "{name:<32} {:>5} {load:>12} {:>10} {:>10}{} {:>10} {:>12}  {}{}\n",
            r.gpus,
            ms(ttft),
            ms(itl),
            tpot_column(&ms(tpot)),
            m.and_then(|m| m.goodput_rps).map_or_else(|| "-".to_owned(), |g| format!("{g:.2}/s")),
            cost_text(r),
            verdict_column(r.answer.name()),
            if with_pools { layout_text(r) } else { String::new() },
        ));
    }
    text.push_str(&notes);
    let mut columns: Vec<ArrayRef> = vec![Arc::new(scenario.finish())];
    columns.extend(deployments.finish());
    if with_pools {
        columns.push(Arc::new(pools.finish()));
    }
    let overrides: arrow_array::DictionaryArray<arrow_array::types::Int32Type> =
        overrides.iter().map(String::as_str).collect();
    columns.push(Arc::new(overrides));
    columns.push(Arc::new(max.finish()));
    columns.push(Arc::new(at_least.finish()));
    columns.extend(metrics.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
    columns.push(Arc::new(binding.finish()));
    columns.push(Arc::new(margin.finish()));
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
    text.push_str(&agg_vs_disagg(rows, search));
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

/// The row's name: the scenario and its overrides.
fn name(r: &Capacity) -> String {
    std::iter::once(r.scenario.clone())
        .chain(r.overrides.iter().map(|(k, v)| format!("{k}={v}")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The capacity as the table prints it: `1.234`, `>= 64.000` (the high end
/// met the SLO), `< 0.5` (the low end missed), `-` (none).
fn load_text(r: &Capacity, search: &Search) -> String {
    match (r.answer, r.max, r.at_least) {
        (Answer::BelowRange, ..) => format!("< {}", search.range.0),
        (_, None, _) => "-".to_owned(),
        (_, Some(v), true) => format!(">= {v:.3}"),
        (_, Some(v), false) => format!("{v:.3}"),
    }
}

fn cost_text(r: &Capacity) -> String {
    r.cost_per_mtok.map_or_else(|| "-".to_owned(), |c| format!("{c:.3}"))
}

/// Its pools (`prefill 1×TP4 H100 + decode 1×TP4 H100`), or, without
/// `pools:`, its replicas, TP and GPU (`2×TP4 H100`).
fn layout_text(r: &Capacity) -> String {
    r.pools.clone().unwrap_or_else(|| r.layout.clone())
}

/// Whether `max` is only a lower bound (the high end met the SLO, or the
/// workload was too short to show more).
fn lower_bound(r: &Capacity) -> bool {
    r.at_least || r.answer == Answer::TooShort
}

/// Aggregated (no prefill pool) against disaggregated deployments: at each
/// GPU count that has both, the best of each (highest capacity, then
/// lowest cost), their capacities and costs, and disaggregated over
/// aggregated. Empty when no GPU count has both.
///
/// The capacity ratio is a bound when one side's capacity is (`>=` when
/// the disaggregated one is at least its value, `<=` when the aggregated
/// one is), and unknown (`-`) when both are or either has none.
pub(super) fn agg_vs_disagg(rows: &[Capacity], search: &Search) -> String {
    let better = |a: &&Capacity, b: &&Capacity| {
        a.max
            .unwrap_or(f64::NEG_INFINITY)
            .total_cmp(&b.max.unwrap_or(f64::NEG_INFINITY))
            // Lower cost is better: compare reversed, unknown cost last.
            .then(b.cost_per_mtok.unwrap_or(f64::MAX).total_cmp(&a.cost_per_mtok.unwrap_or(f64::MAX)))
    };
    let mut by_gpus: BTreeMap<u64, [Option<&Capacity>; 2]> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.answer != Answer::Failed) {
        let best = &mut by_gpus.entry(r.gpus).or_default()[usize::from(r.disaggregated)];
        if best.is_none_or(|b| better(&r, &b).is_gt()) {
            *best = Some(r);
        }
    }
    let pairs: Vec<(u64, &Capacity, &Capacity)> =
        by_gpus.into_iter().filter_map(|(gpus, [agg, disagg])| Some((gpus, agg?, disagg?))).collect();
    if pairs.is_empty() {
        return String::new();
    }
    let heading = match search.over {
        Over::Rate => "max req/s",
        Over::Concurrency => "max users",
    };
    const RATIO: &str = "disaggregated / aggregated";
    let names: Vec<String> = pairs.iter().flat_map(|(_, a, d)| [name(a), name(d)]).collect();
    let layouts: Vec<String> = pairs.iter().flat_map(|(_, a, d)| [layout_text(a), layout_text(d)]).collect();
    let nw = names.iter().map(|n| n.chars().count()).max().unwrap_or(0).max(RATIO.len()).max("deployment".len());
    let lw = layouts.iter().map(|l| l.chars().count()).max().unwrap_or(0).max("pools".len());
    let mut text = "\naggregated vs disaggregated, the best of each at the same GPU count:\n".to_owned();
    text.push_str(&format!(
        "{:>5}  {:<15} {:<nw$}  {:<lw$} {:>12} {:>12}\n",
        "GPUs", "kind", "deployment", "pools", heading, "$/M tokens"
    ));
    let pad = |s: &str, w: usize| format!("{s}{}", " ".repeat(w.saturating_sub(s.chars().count())));
    for (gpus, a, d) in pairs {
        for (kind, r, first) in [("aggregated", a, true), ("disaggregated", d, false)] {
            let g = if first { gpus.to_string() } else { String::new() };
            text.push_str(&format!(
                "{g:>5}  {kind:<15} {}  {} {:>12} {:>12}\n",
                pad(&name(r), nw),
                pad(&layout_text(r), lw),
                load_text(r, search),
                cost_text(r)
            ));
        }
        let capacity = match (a.max, d.max, lower_bound(a), lower_bound(d)) {
            (Some(x), Some(y), false, false) if x > 0.0 => format!("{:.2}×", y / x),
            (Some(x), Some(y), false, true) if x > 0.0 => format!(">= {:.2}×", y / x),
            (Some(x), Some(y), true, false) if x > 0.0 => format!("<= {:.2}×", y / x),
            _ => "-".to_owned(),
        };
        let cost = match (a.cost_per_mtok, d.cost_per_mtok) {
            (Some(x), Some(y)) if x > 0.0 => format!("{:.2}×", y / x),
            _ => "-".to_owned(),
        };
        text.push_str(&format!(
            "{:>5}  {:<15} {}  {} {capacity:>12} {cost:>12}\n",
            "",
            "",
            pad(RATIO, nw),
            " ".repeat(lw)
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(scenario: &str, gpus: u64, pools: Option<&str>, max: Option<f64>, cost: Option<f64>) -> Capacity {
        Capacity {
            scenario: scenario.to_owned(),
            overrides: Vec::new(),
            gpus,
            gpu: "H100".to_owned(),
            pools: pools.map(str::to_owned),
            layout: "-".to_owned(),
            disaggregated: pools.is_some_and(|p| p.contains("prefill")),
            deployment: DeploymentRow::default(),
            max,
            at_least: false,
            metrics: None,
            cost_per_mtok: cost,
            probes: 3,
            answer: if max.is_some() { Answer::Capacity } else { Answer::BelowRange },
            note: None,
        }
    }

    fn search() -> Search {
        let spec: crate::sweep::plan::SearchSpec =
            crate::yaml::parse("{slo: {ttft_p99_ms: 1000}, range: [0.5, 64]}").unwrap();
        spec.resolve().unwrap()
    }

    #[test]
    fn the_comparison_pairs_the_best_of_each_kind_at_each_gpu_count() {
        let rows = [
            row("agg", 8, Some("mixed 2×TP4 H100"), Some(2.0), Some(10.0)),
            row("pd-1p1d", 8, Some("prefill 1×TP4 H100 + decode 1×TP4 H100"), Some(3.0), Some(7.0)),
            // The better disaggregated deployment at 16 GPUs, and a worse one.
            row("agg4", 16, Some("mixed 4×TP4 H100"), Some(4.0), Some(10.0)),
            row("pd-2p2d", 16, Some("prefill 2×TP4 H100 + decode 2×TP4 H100"), Some(6.0), Some(6.5)),
            row("pd-3p1d", 16, Some("prefill 3×TP4 H100 + decode 1×TP4 H100"), Some(1.0), Some(40.0)),
            // Only aggregated at 4 GPUs: no pair.
            row("agg1", 4, Some("mixed 1×TP4 H100"), Some(1.0), Some(10.0)),
        ];
        let text = agg_vs_disagg(&rows, &search());
        let expected = "
aggregated vs disaggregated, the best of each at the same GPU count:
 GPUs  kind            deployment                  pools                                     max req/s   $/M tokens
    8  aggregated      agg                         mixed 2×TP4 H100                              2.000       10.000
       disaggregated   pd-1p1d                     prefill 1×TP4 H100 + decode 1×TP4 H100        3.000        7.000
                       disaggregated / aggregated                                                1.50×        0.70×
   16  aggregated      agg4                        mixed 4×TP4 H100                              4.000       10.000
       disaggregated   pd-2p2d                     prefill 2×TP4 H100 + decode 2×TP4 H100        6.000        6.500
                       disaggregated / aggregated                                                1.50×        0.65×
";
        assert_eq!(text, expected, "\n{text}");
    }

    #[test]
    fn the_comparison_is_empty_without_both_kinds_and_bounds_what_is_only_bounded() {
        let agg = row("agg", 8, None, Some(2.0), Some(10.0));
        assert_eq!(agg_vs_disagg(std::slice::from_ref(&agg), &search()), "");
        // The disaggregated one met the high end: the ratio is a lower bound.
        let mut pd = row("pd", 8, Some("prefill 1×TP4 H100 + decode 1×TP4 H100"), Some(64.0), None);
        pd.at_least = true;
        pd.answer = Answer::AtLeast;
        let text = agg_vs_disagg(&[agg.clone(), pd.clone()], &search());
        assert!(text.contains(">= 64.000") && text.contains(">= 32.00×"), "{text}");
        // A cost unknown on one side: no cost ratio.
        assert!(text.lines().last().unwrap().ends_with(" -"), "{text}");
        // An aggregated one below the range: no capacity ratio.
        let low = row("agg", 8, None, None, None);
        let text = agg_vs_disagg(&[low, pd], &search());
        assert!(
            text.contains("< 0.5") && text.lines().last().unwrap().trim_end().ends_with("-            -"),
            "{text}"
        );
    }
}
