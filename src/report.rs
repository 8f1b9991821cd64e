//! `blis-sweep report OUTPUT_DIR`: one self-contained HTML page
//! (`report.html`, opens offline: Vega-Lite charts drawn by the vendored
//! Vega, see `page.rs`) from a sweep's output folder, or a sharded sweep's
//! parent (`read.rs`). A reading guide, in page order:
//!
//! - `capacity.rs`: the answer — the cheapest deployment meeting the
//!   target, its GPUs, cost and binding SLO metric; every deployment's row
//!   and bar (`capacity.parquet`).
//! - `points.rs` + `pareto.rs`, drawn by `tradeoff.rs`: one point per grid
//!   point of `runs.parquet` (seeds a spread, never a mean), the Pareto
//!   frontier of output tokens/s per GPU against tokens/s per user and
//!   against TTFT p99.
//! - `load.rs`: latency, throughput and goodput against absolute load, a
//!   small multiple per deployment, SLO targets as bands.
//! - `autoscale.rs`, `classes.rs`, `calibration.rs`: replicas over time,
//!   per-class results, the calibration matrix (`calibration.parquet`).
//! - then the runs table, and the page's data as JSON (`#report-data`).
//!
//! `charts.rs` writes the Vega-Lite specs. Sweeps write the report at the
//! end unless `--no-report`.

mod autoscale;
mod calibration;
mod capacity;
mod charts;
mod classes;
mod load;
mod page;
mod pareto;
mod points;
mod read;
mod tradeoff;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::metrics::{Metrics, Slo};
use page::escape;
use points::RunLoad;
use read::{Folders, run_metrics, run_rows};

/// A folder that cannot be reported on.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A file cannot be read or written.
    #[error("{file}: {reason}")]
    File {
        /// The path.
        file: String,
        /// Why.
        reason: String,
    },
}

fn file_err(path: &Path, reason: impl std::fmt::Display) -> ReportError {
    ReportError::File { file: path.display().to_string(), reason: reason.to_string() }
}

/// One run of the manifest, with its metrics when it finished.
struct Run {
    run_id: String,
    /// Its scenario and overrides.
    deployment: String,
    /// Its client's concurrency (`None`: open loop).
    concurrency: Option<u64>,
    seed: Option<u64>,
    rate_scale: f64,
    /// Its client and offered load (manifest.json's).
    load: RunLoad,
    status: String,
    metrics: Option<Metrics>,
}

impl Run {
    /// Its client as the runs table shows it: `open loop`, `≤ 8 in
    /// flight`, `8 users`.
    fn client_text(&self) -> String {
        match (self.load.client.as_str(), self.concurrency) {
            ("closed_loop", Some(u)) => format!("{u} users"),
            (_, Some(c)) => format!("≤ {c} in flight"),
            ("capped", None) => "capped".to_owned(),
            _ => "open loop".to_owned(),
        }
    }
}

/// Writes `dir/report.html`; returns its path. `dir` is a sweep's output
/// folder, a calibration plan's, or a sharded sweep's parent folder (its
/// `shard=I/` folders reported as one sweep).
pub fn write(dir: &Path) -> Result<PathBuf, ReportError> {
    let folders = Folders::of(dir);
    let mut html = String::new();
    let calibration = folders.with("calibration.parquet");
    let name = if let Some(v) = folders.manifest()? {
        let name = v["name"].as_str().unwrap_or("sweep").to_owned();
        let slo: Option<Slo> = serde_json::from_value(v["slo"].clone()).ok().flatten();
        if folders.sharded() {
            let _ = write!(
                html,
                "<p>A sharded sweep: {} shards ({}), reported as one.</p>",
                folders.dirs.len(),
                folders
                    .dirs
                    .iter()
                    .filter_map(|d| d.file_name())
                    .map(|n| n.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            // The first shard recorded how many there are: say which have
            // not written anything yet (not run, or still running).
            if let Ok(Some(count)) = crate::sweep::shard::recorded(dir) {
                let missing: Vec<String> = (0..count)
                    .filter(|i| !dir.join(format!("shard={i}/manifest.json")).exists())
                    .map(|i| format!("shard={i}"))
                    .collect();
                if !missing.is_empty() {
                    let _ = write!(
                        html,
                        "<p><strong>Incomplete:</strong> the sweep has {count} shards (shards.json); {} not written yet (not run, or still running), so these tables hold part of it.</p>",
                        missing.join(", ")
                    );
                }
            }
        }
        sweep_sections(&folders, &v, slo.as_ref(), &mut html)?;
        name
    } else if !calibration.is_empty() {
        "calibration".to_owned()
    } else {
        return Err(file_err(dir, "no manifest.json or calibration.parquet: not a sweep's output folder"));
    };
    if !calibration.is_empty() {
        calibration::section(&folders.rows("calibration.parquet")?, &mut html);
    }
    let page = page::page(&name, &html);
    let path = dir.join("report.html");
    crate::atomic::write_file(&path, page.as_bytes()).map_err(|e| file_err(&path, e))?;
    Ok(path)
}

fn sweep_sections(
    folders: &Folders,
    manifest: &Value,
    slo: Option<&Slo>,
    html: &mut String,
) -> Result<(), ReportError> {
    let entries = manifest["runs"].as_array().cloned().unwrap_or_default();
    let mut runs = Vec::new();
    let mut loads = HashMap::new();
    for r in &entries {
        let run_id = r["run_id"].as_str().unwrap_or_default().to_owned();
        let deployment = points::deployment(r["scenario"].as_str().unwrap_or_default(), &r["overrides"]);
        let status = r["status"].as_str().unwrap_or("?").to_owned();
        // A run the manifest lists as finished has its metrics: without them
        // the report would draw nothing and still look whole.
        let folder = &folders.dirs[r["folder"].as_u64().unwrap_or(0) as usize];
        let metrics = if status == "ok" { Some(run_metrics(folder, &run_id)?) } else { None };
        let load = RunLoad {
            client: r["client"].as_str().unwrap_or_default().to_owned(),
            offered_rps: r["offered_rps"].as_f64(),
        };
        runs.push(Run {
            run_id: run_id.clone(),
            deployment,
            concurrency: r["concurrency"].as_u64(),
            seed: r["seed"].as_u64(),
            rate_scale: r["rate_scale"].as_f64().unwrap_or(1.0),
            load: load.clone(),
            status,
            metrics,
        });
        loads.insert(run_id, load);
    }
    // The points come from the runs table (the shards' in the manifest's
    // order); a folder without one (a sweep from before it, or one cut
    // short) still gets its capacity and runs, and the page says what is
    // missing.
    let missing: Vec<PathBuf> = folders.dirs.iter().map(|d| d.join("runs.parquet")).filter(|p| !p.exists()).collect();
    let has_table = missing.is_empty();
    let mut rows = Vec::new();
    if has_table {
        for dir in &folders.dirs {
            rows.extend(run_rows(&dir.join("runs.parquet"))?);
        }
        let order: HashMap<&str, usize> = runs.iter().enumerate().map(|(i, r)| (r.run_id.as_str(), i)).collect();
        rows.sort_by_key(|r| order.get(r.run_id.as_str()).copied().unwrap_or(usize::MAX));
    } else {
        let _ = write!(
            html,
            "<p class=\"missing\">{} is missing: no frontier and no load charts (run the sweep again to rebuild it).</p>",
            if folders.sharded() { escape(&missing[0].display().to_string()) } else { "runs.parquet".to_owned() }
        );
    }
    let data = points::collect(&rows, &loads);
    let seeds = data.points.iter().map(|p| p.seeds.len()).max().unwrap_or(0);
    let _ = write!(
        html,
        "<p>{} runs: {} grid points (a scenario with its overrides, a client and a load){}. Each grid point is \
         its own point, never averaged with another{}</p>",
        runs.len(),
        data.points.len(),
        if seeds > 1 { format!(", up to {seeds} seeds each") } else { String::new() },
        if seeds > 1 {
            "; its seeds are a spread (the band: lowest to highest), the line its worst seed, as the capacity \
             search judges a load: met only when every seed met the SLO."
        } else {
            "."
        }
    );
    // The answer first: the capacity of each deployment, cheapest on top.
    let capacity = if !folders.with("capacity.parquet").is_empty() {
        let target = manifest["capacity_target"].as_f64();
        let rows = capacity::rows(&folders.rows("capacity.parquet")?, slo, target);
        capacity::section(&rows, target, html);
        rows
    } else {
        Vec::new()
    };
    if has_table {
        let names = short_names(&data);
        tradeoff::section(&data, &names, html);
        load::sections(&data, &names, slo, html);
    }
    autoscale::section(runs.iter().filter_map(|r| Some((r.run_id.as_str(), r.metrics.as_ref()?))), html);
    classes::section(&folders.rows("classes.parquet")?, &runs, html);
    // The runs.
    html.push_str(
        "<h2>Runs</h2><table id=\"runs\"><tr><th>run</th><th>deployment</th><th>latency model</th><th>client</th><th>seed</th>\
         <th>offered req/s</th><th>status</th><th>TTFT p99 ms</th><th>ITL p99 ms</th><th>E2E p99 ms</th><th>req/s</th><th>goodput req/s</th></tr>",
    );
    for r in &runs {
        let m = r.metrics.as_ref();
        let ms = |v: Option<f64>| v.map_or_else(|| "–".to_owned(), |v| format!("{v:.1}"));
        let rate = |v: Option<f64>| v.map_or_else(|| "–".to_owned(), sig3);
        let _ = write!(
            html,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&r.run_id),
            escape(&r.deployment),
            escape(&latency_model(m)),
            r.client_text(),
            r.seed.map_or_else(|| "–".to_owned(), |s| s.to_string()),
            rate(r.load.offered_rps.filter(|_| r.load.client != "closed_loop")),
            escape(&r.status),
            ms(m.map(|m| m.ttft_p99_ms)),
            ms(m.map(|m| m.itl_p99_ms)),
            ms(m.map(|m| m.e2e_p99_ms)),
            rate(m.map(|m| m.responses_per_sec)),
            rate(m.and_then(|m| m.goodput_rps)),
        );
    }
    html.push_str("</table>");
    // The data the page shows, for a renderer and for tests: one point per
    // grid point, the frontiers, the capacity rows.
    let embedded = serde_json::json!({
        "slo": slo,
        "capacity_target": manifest["capacity_target"],
        "worst_seed_rule": "a point's frontier coordinates are its worst seed's: the lowest output tokens/s per GPU, \
                            the lowest output tokens/s per user (1000 / mean TPOT ms), the highest TTFT p99; it meets \
                            the SLO when every seed did",
        "points": data.points,
        "frontier": {"tokens_per_sec_per_user": data.frontier_per_user, "ttft_p99_ms": data.frontier_ttft},
        "capacity": capacity,
    });
    let _ =
        write!(html, "<script type=\"application/json\" id=\"report-data\">{}</script>", page::script_json(&embedded));
    Ok(())
}

/// A number to 3 significant digits (`0.0495`, `8.70`, `1234` → `1230`).
fn sig3(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v == 0.0 { "0".to_owned() } else { v.to_string() };
    }
    let decimals = 2 - v.abs().log10().floor() as i32;
    if decimals > 0 {
        format!("{v:.*}", decimals as usize)
    } else {
        let unit = 10f64.powi(-decimals);
        format!("{:.0}", (v / unit).round() * unit)
    }
}

/// The charts' names for the points: the scenario when there is more than
/// one, and the overrides whose value varies among the points.
fn short_names(data: &points::Data) -> Vec<String> {
    let scenarios: std::collections::BTreeSet<&str> = data.points.iter().map(|p| p.scenario.as_str()).collect();
    let mut values: BTreeMap<&str, std::collections::BTreeSet<String>> = BTreeMap::new();
    for p in &data.points {
        for (k, v) in p.overrides.as_object().into_iter().flatten() {
            values.entry(k).or_default().insert(v.to_string());
        }
    }
    data.points
        .iter()
        .map(|p| {
            let mut parts = Vec::new();
            if scenarios.len() > 1 || values.values().all(|v| v.len() < 2) {
                parts.push(p.scenario.clone());
            }
            for (k, v) in p.overrides.as_object().into_iter().flatten() {
                if values.get(k.as_str()).is_some_and(|v| v.len() > 1) {
                    parts.push(format!("{k}={}", v.as_str().map_or_else(|| v.to_string(), str::to_owned)));
                }
            }
            parts.join(" ")
        })
        .collect()
}

/// A point's load as text: `2.50 req/s`, `8 users`.
fn load_text(p: &points::Point) -> String {
    match (p.client.as_str(), p.load()) {
        ("closed_loop", Some(u)) => format!("{u} users"),
        (_, Some(r)) => {
            let cap = p.concurrency.map_or_else(String::new, |c| format!(", ≤ {c} in flight"));
            format!("{} req/s{cap}", sig3(r))
        }
        _ => format!("rate ×{}", p.rate_scale),
    }
}

/// Which latency model priced a run and why, as `kind: reason` (`–` for a
/// run without metrics, or metrics written before they said).
fn latency_model(m: Option<&Metrics>) -> String {
    match m.map(|m| (&m.latency_model, &m.latency_model_reason)) {
        Some((Some(kind), Some(why))) => format!("{kind}: {why}"),
        Some((Some(kind), None)) => kind.clone(),
        _ => "–".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_rounded_to_three_significant_digits() {
        let cases = [(0.04950907702567523, "0.0495"), (8.7, "8.70"), (1234.5, "1230"), (99.96, "100.0"), (0.0, "0")];
        for (v, text) in cases {
            assert_eq!(sig3(v), text, "{v}");
        }
        assert_eq!(sig3(-2.5), "-2.50");
    }
}
