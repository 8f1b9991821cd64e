//! `blis-sweep report OUTPUT_DIR`: one self-contained HTML page
//! (`report.html`: inline SVG, no script, no network) from a sweep's output
//! folder — latency (TTFT, ITL, E2E p50 and p99; TPOT too under a TPOT target) and throughput with goodput
//! against offered load per deployment, the SLO's targets as lines; the
//! capacity of each deployment (`capacity.parquet`); the calibration matrix
//! as a heatmap with BLIS's errors beside ours (`calibration.parquet`); and
//! the runs; the replica count over time of the runs that autoscaled. Sweeps
//! write it at the end unless `--no-report`.

mod autoscale;
mod classes;
mod pareto;
mod points;
mod svg;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::metrics::{Metrics, Slo};
use points::{METRICS, RunLoad, RunRow};
use svg::{bar_chart, escape, line_chart};

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

/// Writes `dir/report.html`; returns its path.
pub fn write(dir: &Path) -> Result<PathBuf, ReportError> {
    let mut html = String::new();
    let manifest = dir.join("manifest.json");
    let calibration = dir.join("calibration.parquet");
    let name = if manifest.exists() {
        let text = std::fs::read_to_string(&manifest).map_err(|e| file_err(&manifest, e))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| file_err(&manifest, e))?;
        let name = v["name"].as_str().unwrap_or("sweep").to_owned();
        let slo: Option<Slo> = serde_json::from_value(v["slo"].clone()).ok().flatten();
        sweep_sections(dir, &v, slo.as_ref(), &mut html)?;
        name
    } else if calibration.exists() {
        "calibration".to_owned()
    } else {
        return Err(file_err(dir, "no manifest.json or calibration.parquet: not a sweep's output folder"));
    };
    if calibration.exists() {
        calibration_section(&calibration, &mut html)?;
    }
    let page = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title><style>\
         body{{font-family:sans-serif;max-width:1040px;margin:2em auto;color:#222}}figure{{margin:1em 0}}\
         table{{border-collapse:collapse;font-size:12px}}td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}\
         th{{background:#f4f4f4}}td.l{{text-align:left}}.charts{{display:flex;flex-wrap:wrap;gap:8px}}</style></head>\
         <body><h1>{t}</h1>\n{html}</body></html>\n",
        t = escape(&name)
    );
    let path = dir.join("report.html");
    crate::atomic::write_file(&path, page.as_bytes()).map_err(|e| file_err(&path, e))?;
    Ok(path)
}

fn sweep_sections(dir: &Path, manifest: &Value, slo: Option<&Slo>, html: &mut String) -> Result<(), ReportError> {
    let entries = manifest["runs"].as_array().cloned().unwrap_or_default();
    let mut runs = Vec::new();
    let mut loads = HashMap::new();
    for r in &entries {
        let run_id = r["run_id"].as_str().unwrap_or_default().to_owned();
        let mut deployment = r["scenario"].as_str().unwrap_or_default().to_owned();
        if let Some(o) = r["overrides"].as_object() {
            for (k, v) in o {
                let _ = write!(deployment, " {k}={}", v.as_str().map_or_else(|| v.to_string(), str::to_owned));
            }
        }
        let status = r["status"].as_str().unwrap_or("?").to_owned();
        // A run the manifest lists as finished has its metrics: without them
        // the report would draw nothing and still look whole.
        let metrics = if status == "ok" { Some(run_metrics(dir, &run_id)?) } else { None };
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
    // The points come from the runs table; a folder without one (a sweep
    // from before it, or one cut short) still gets its capacity and runs,
    // and the page says what is missing.
    let runs_table = dir.join("runs.parquet");
    let has_table = runs_table.exists();
    let data = points::collect(&if has_table { run_rows(&runs_table)? } else { Vec::new() }, &loads);
    if !has_table {
        html.push_str(
            "<p class=\"missing\">runs.parquet is missing: no frontier and no load charts (run the sweep again to \
             rebuild it).</p>",
        );
    }
    let seeds = data.points.iter().map(|p| p.seeds.len()).max().unwrap_or(0);
    let _ = write!(
        html,
        "<p>{} runs: {} grid points (a scenario with its overrides, a client and a load){}. Each grid point is \
         its own point, never averaged with another; {}</p>",
        runs.len(),
        data.points.len(),
        if seeds > 1 { format!(", up to {seeds} seeds each") } else { String::new() },
        if seeds > 1 {
            "its seeds are a spread (the band: lowest to highest), the line its worst seed, as the capacity \
             search judges a load: met only when every seed met the SLO."
        } else {
            "the capacity search judges a load met only when every seed met the SLO."
        }
    );
    // The answer first: the capacity of each deployment, cheapest on top.
    let capacity_path = dir.join("capacity.parquet");
    let capacity = if capacity_path.exists() {
        let target = manifest["capacity_target"].as_f64();
        let rows = capacity_rows(&read_rows(&capacity_path)?, slo, target);
        capacity_section(&rows, target, html);
        rows
    } else {
        Vec::new()
    };
    if has_table {
        pareto_section(&data, html);
        load_sections(&data, slo, html);
    }
    autoscale::section(runs.iter().filter_map(|r| Some((r.run_id.as_str(), r.metrics.as_ref()?))), html);
    let classes = dir.join("classes.parquet");
    if classes.exists() {
        classes::section(&classes, &runs, html)?;
    }
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
    // `</` would end the script element: JSON allows `\/` for `/`.
    let json = serde_json::to_string(&embedded).map_err(|e| file_err(dir, e))?.replace("</", "<\\/");
    let _ = write!(html, "<script type=\"application/json\" id=\"report-data\">{json}</script>");
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

/// Output tokens/s per GPU against tokens/s per user and against TTFT p99,
/// every grid point, the frontier joined; then the frontier's points.
fn pareto_section(data: &points::Data, html: &mut String) {
    let names = short_names(data);
    let worst = |p: &points::Point, name: &str, high: bool| {
        p.get(name).filter(|_| p.complete()).map_or(f64::NAN, |s| if high { s.max } else { s.min })
    };
    let title = |p: &points::Point| {
        format!(
            "{} · {} · {} tok/s/GPU · {} tok/s/user · TTFT p99 {:.1} ms{}",
            names[p.id],
            load_text(p),
            sig3(worst(p, "tokens_per_sec_per_gpu", false)),
            sig3(worst(p, "tokens_per_sec_per_user", false)),
            worst(p, "ttft_p99_ms", true),
            match p.met {
                Some(true) => " · meets the SLO",
                Some(false) => " · misses the SLO",
                None => "",
            }
        )
    };
    let marks = |x: &dyn Fn(&points::Point) -> f64, on: &[usize]| -> Vec<svg::Mark> {
        data.points
            .iter()
            .map(|p| svg::Mark {
                x: x(p),
                y: worst(p, "tokens_per_sec_per_gpu", false),
                met: p.met,
                frontier: on.contains(&p.id),
                title: title(p),
            })
            .collect()
    };
    html.push_str(
        "<h2>Throughput per GPU against speed per user</h2><p>Every deployment at every load run (capacity probes \
         included), at its worst seed; the line joins the Pareto frontier: the points no other point beats on both \
         axes. Filled: every seed met the SLO.</p><div class=\"charts\">",
    );
    html.push_str(&svg::scatter_chart(
        "pareto",
        "Output tokens/s per GPU against output tokens/s per user",
        "output tokens/s per user (1000 / mean TPOT)",
        "output tokens/s per GPU",
        &marks(&|p| worst(p, "tokens_per_sec_per_user", false), &data.frontier_per_user),
    ));
    html.push_str(&svg::scatter_chart(
        "pareto-ttft",
        "Output tokens/s per GPU against TTFT p99",
        "TTFT p99 (ms)",
        "output tokens/s per GPU",
        &marks(&|p| worst(p, "ttft_p99_ms", true), &data.frontier_ttft),
    ));
    html.push_str(
        "</div><table id=\"frontier\"><tr><th>deployment</th><th>GPUs</th><th>load</th><th>tok/s per GPU</th>\
         <th>tok/s per user</th><th>TTFT p99 ms</th><th>ITL p99 ms</th><th>SLO</th></tr>",
    );
    for &i in &data.frontier_per_user {
        let p = &data.points[i];
        let _ = write!(
            html,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td class=\"l\">{}</td></tr>",
            escape(&names[i]),
            p.gpus.map_or_else(|| "–".to_owned(), |g| g.to_string()),
            escape(&load_text(p)),
            sig3(worst(p, "tokens_per_sec_per_gpu", false)),
            sig3(worst(p, "tokens_per_sec_per_user", false)),
            worst(p, "ttft_p99_ms", true),
            worst(p, "itl_p99_ms", true),
            match p.met {
                Some(true) => "met",
                Some(false) => "missed",
                None => "–",
            }
        );
    }
    html.push_str("</table>");
}

/// Latency, throughput and goodput against load: arrival-driven runs (open
/// loop, capped) against the req/s offered, closed-loop runs against their
/// users, never on one axis. A line per deployment (and cap): its worst
/// seed, the band its seeds' spread.
fn load_sections(data: &points::Data, slo: Option<&Slo>, html: &mut String) {
    let names = short_names(data);
    let groups = [
        ("", "offered load (req/s)", false, "Latency against offered load"),
        ("-closed", "users (closed loop)", true, "Latency against users (closed loop)"),
    ];
    for (suffix, x_label, closed, heading) in groups {
        let chosen: Vec<&points::Point> = data
            .points
            .iter()
            .filter(|p| (p.client == "closed_loop") == closed && p.load().is_some() && p.ok > 0)
            .collect();
        if chosen.is_empty() {
            continue;
        }
        // Series: the deployment, and for a capped client its cap.
        let series_name = |p: &points::Point| match (p.client.as_str(), p.concurrency) {
            ("capped", Some(c)) => format!("{} ≤ {c} in flight", names[p.id]),
            ("capped", None) => format!("{} capped", names[p.id]),
            ("open_loop", _) if chosen.iter().any(|q| q.client == "capped") => format!("{} open loop", names[p.id]),
            _ => names[p.id].clone(),
        };
        let mut keys: Vec<String> = Vec::new();
        for p in &chosen {
            let k = series_name(p);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        let curve = |metric: &str, high: bool, suffix: &str, dashed: bool| -> Vec<svg::Series> {
            keys.iter()
                .filter_map(|k| {
                    let mut points = Vec::new();
                    let mut band = Vec::new();
                    for p in chosen.iter().filter(|p| series_name(p) == *k) {
                        let (Some(x), Some(s)) = (p.load(), p.get(metric)) else { continue };
                        points.push((x, if high { s.max } else { s.min }));
                        if p.ok > 1 {
                            band.push((x, s.min, s.max));
                        }
                    }
                    (!points.is_empty()).then(|| svg::Series { name: format!("{k}{suffix}"), points, dashed, band })
                })
                .collect()
        };
        let target =
            |name: &str, v: Option<f64>| v.map(|v| (format!("SLO {name} {v} ms"), v)).into_iter().collect::<Vec<_>>();
        let _ = write!(html, "<h2>{heading}</h2><div class=\"charts\">");
        let charts = [
            ("ttft", "TTFT p99", "ttft_p99_ms", slo.and_then(|s| s.ttft_p99_ms)),
            ("itl", "ITL p99", "itl_p99_ms", slo.and_then(|s| s.itl_p99_ms)),
            ("tpot", "TPOT p99", "tpot_p99_ms", slo.and_then(|s| s.tpot_p99_ms)),
            ("e2e", "E2E p99", "e2e_p99_ms", slo.and_then(|s| s.e2e_p99_ms)),
        ];
        // TPOT's chart only under a TPOT target: other reports stay as they were.
        for (id, title, metric, slo_ms) in charts.into_iter().filter(|c| c.0 != "tpot" || c.3.is_some()) {
            html.push_str(&line_chart(
                &format!("{id}{suffix}"),
                title,
                x_label,
                &[],
                "ms",
                &curve(metric, true, "", false),
                &target(title, slo_ms),
            ));
        }
        let mut throughput = curve("responses_per_sec", false, " served", false);
        let goodput = curve("goodput_rps", false, " goodput", true);
        if !goodput.is_empty() {
            throughput = throughput
                .into_iter()
                .flat_map(|s| {
                    let g = goodput.iter().find(|g| g.name.strip_suffix(" goodput") == s.name.strip_suffix(" served"));
                    std::iter::once(s).chain(g.cloned())
                })
                .collect();
        }
        html.push_str(&line_chart(
            &format!("throughput{suffix}"),
            "Requests served and goodput",
            x_label,
            &[],
            "req/s",
            &throughput,
            &[],
        ));
        html.push_str("</div>");
    }
    let without = data.points.iter().filter(|p| p.load().is_none()).count();
    if without > 0 {
        let _ = write!(
            html,
            "<p>{without} grid points have no offered rate (their workload's arrivals span no time): in the runs \
             table only.</p>"
        );
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

/// The metrics of run `run_id`, which the manifest lists as finished: a
/// missing or unreadable file is an error naming it.
fn run_metrics(dir: &Path, run_id: &str) -> Result<Metrics, ReportError> {
    let path = dir.join("runs").join(run_id).join("metrics.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::NotFound { "missing".to_owned() } else { e.to_string() };
        file_err(&path, format!("{why}, though manifest.json lists the run as ok; run the sweep again to redo it"))
    })?;
    serde_json::from_str(&text)
        .map_err(|e| file_err(&path, format!("not a run's metrics ({e}); run the sweep again to redo the run")))
}

/// Rows of a Parquet file as JSON values by column name.
fn read_rows(path: &Path) -> Result<Vec<BTreeMap<String, Value>>, ReportError> {
    use arrow_array::types::Int32Type;
    use arrow_array::{Array, BooleanArray, DictionaryArray, Float64Array, Int64Array, StringArray};
    let mut rows = Vec::new();
    for batch in decode(path, None)? {
        for i in 0..batch.num_rows() {
            let mut row = BTreeMap::new();
            for (field, col) in batch.schema().fields().iter().zip(batch.columns()) {
                let any = col.as_any();
                let v = if col.is_null(i) {
                    Value::Null
                } else if let Some(a) = any.downcast_ref::<Float64Array>() {
                    serde_json::Number::from_f64(a.value(i)).map_or(Value::Null, Value::Number)
                } else if let Some(a) = any.downcast_ref::<Int64Array>() {
                    Value::from(a.value(i))
                } else if let Some(a) = any.downcast_ref::<StringArray>() {
                    Value::from(a.value(i))
                } else if let Some(a) = any.downcast_ref::<DictionaryArray<Int32Type>>() {
                    a.downcast_dict::<StringArray>()
                        .map_or(Value::Null, |d| Value::from(d.values().value(a.keys().value(i) as usize)))
                } else if let Some(a) = any.downcast_ref::<BooleanArray>() {
                    Value::from(a.value(i))
                } else {
                    Value::Null
                };
                row.insert(field.name().clone(), v);
            }
            rows.push(row);
        }
    }
    Ok(rows)
}

/// The record batches of the Parquet file at `path`. The parquet crate
/// (60.1) can panic on a corrupt file rather than fail (a mutated table's
/// null bitmap read out of bounds in arrow-buffer's bit-chunk iterator,
/// found by fuzzing, about one table in 600): that panic is caught and
/// reported as the file's error. Its message is kept off stderr while the
/// decode runs by a silent panic hook, the previous one put back after: a
/// report is written on one thread, after a sweep's workers have finished.
fn decode(path: &Path, columns: Option<&[&str]>) -> Result<Vec<arrow_array::RecordBatch>, ReportError> {
    let read = || -> Result<Vec<arrow_array::RecordBatch>, ReportError> {
        let file = std::fs::File::open(path).map_err(|e| file_err(path, e))?;
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .and_then(|b| match columns {
                Some(names) => {
                    let mask = parquet::arrow::ProjectionMask::columns(b.parquet_schema(), names.iter().copied());
                    b.with_projection(mask).build()
                }
                None => b.build(),
            })
            .map_err(|e| file_err(path, e))?;
        reader.map(|batch| batch.map_err(|e| file_err(path, e))).collect()
    };
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(read);
    std::panic::set_hook(previous);
    result.unwrap_or_else(|_| Err(file_err(path, "not a readable Parquet table (its data is corrupt)")))
}

/// The runs table's columns a point needs, row by row (a column the table
/// lacks reads as null).
fn run_rows(path: &Path) -> Result<Vec<RunRow>, ReportError> {
    use arrow_array::types::Int32Type;
    use arrow_array::{Array, ArrayRef, BooleanArray, DictionaryArray, Float64Array, Int64Array, StringArray};
    let head = ["run_id", "scenario", "overrides", "concurrency", "rate_scale", "seed", "status", "gpus", "slo_met"];
    let names: Vec<&str> = head.iter().chain(METRICS.iter()).copied().collect();
    let text = |c: Option<&ArrayRef>, i: usize| -> String {
        let Some(c) = c.filter(|c| !c.is_null(i)) else { return String::new() };
        if let Some(a) = c.as_any().downcast_ref::<StringArray>() {
            a.value(i).to_owned()
        } else if let Some(a) = c.as_any().downcast_ref::<DictionaryArray<Int32Type>>() {
            a.downcast_dict::<StringArray>()
                .map_or_else(String::new, |d| d.values().value(a.keys().value(i) as usize).to_owned())
        } else {
            String::new()
        }
    };
    let int = |c: Option<&ArrayRef>, i: usize| {
        c.filter(|c| !c.is_null(i)).and_then(|c| c.as_any().downcast_ref::<Int64Array>()).map(|a| a.value(i))
    };
    let float = |c: Option<&ArrayRef>, i: usize| {
        let c = c.filter(|c| !c.is_null(i))?;
        c.as_any()
            .downcast_ref::<Float64Array>()
            .map(|a| a.value(i))
            .or_else(|| c.as_any().downcast_ref::<Int64Array>().map(|a| a.value(i) as f64))
    };
    let mut rows = Vec::new();
    for batch in decode(path, Some(&names))? {
        let col = |n: &str| batch.column_by_name(n);
        for i in 0..batch.num_rows() {
            let mut metrics = [None; METRICS.len()];
            for (m, name) in metrics.iter_mut().zip(METRICS) {
                *m = float(col(name), i);
            }
            rows.push(RunRow {
                run_id: text(col("run_id"), i),
                scenario: text(col("scenario"), i),
                overrides: text(col("overrides"), i),
                concurrency: int(col("concurrency"), i),
                rate_scale: float(col("rate_scale"), i).unwrap_or(1.0),
                seed: int(col("seed"), i).unwrap_or(0),
                status: text(col("status"), i),
                gpus: int(col("gpus"), i),
                slo_met: col("slo_met")
                    .filter(|c| !c.is_null(i))
                    .and_then(|c| c.as_any().downcast_ref::<BooleanArray>())
                    .map(|a| a.value(i)),
                metrics,
            });
        }
    }
    Ok(rows)
}

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
struct CapacityRow {
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
fn capacity_rows(rows: &[BTreeMap<String, Value>], slo: Option<&Slo>, target: Option<f64>) -> Vec<CapacityRow> {
    let mut out: Vec<CapacityRow> = rows
        .iter()
        .map(|r| {
            // A column the table lacks reads as null (a table from elsewhere).
            let r = |k: &str| r.get(k).unwrap_or(&Value::Null);
            let overrides = r("overrides").as_str().and_then(|o| serde_json::from_str::<Value>(o).ok());
            let mut deployment = r("scenario").as_str().unwrap_or_default().to_owned();
            for (k, v) in overrides.as_ref().and_then(Value::as_object).into_iter().flatten() {
                let _ = write!(deployment, " {k}={}", v.as_str().map_or_else(|| v.to_string(), str::to_owned));
            }
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
fn capacity_section(rows: &[CapacityRow], target: Option<f64>, html: &mut String) {
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
    let bars: Vec<(String, f64, String)> = rows
        .iter()
        .map(|r| {
            let note = match (r.max, r.verdict.as_str()) {
                (Some(m), "too_short") => format!("≥ {} (workload too short for more)", sig3(m)),
                (Some(m), _) => {
                    format!("{}{} · {} GPUs", if r.at_least { "≥ " } else { "" }, sig3(m), r.gpus.unwrap_or(0))
                }
                (None, "failed") => "failed: a probe could not run".to_owned(),
                (None, "requests_failed") => "no load: too many requests fail".to_owned(),
                (None, "too_short") => "workload too short".to_owned(),
                (None, _) => "below the range".to_owned(),
            };
            (r.deployment.clone(), r.max.unwrap_or(0.0), note)
        })
        .collect();
    html.push_str(&bar_chart("capacity-bars", "Highest load within the SLO, per deployment", unit, &bars, target));
}

fn calibration_section(path: &Path, html: &mut String) -> Result<(), ReportError> {
    let rows = read_rows(path)?;
    let mut runs: Vec<String> = Vec::new();
    let mut metrics: Vec<String> = Vec::new();
    let mut cells: BTreeMap<(String, String), (Option<f64>, Option<f64>)> = BTreeMap::new();
    for r in &rows {
        let run = r.get("experiment").or(r.get("run")).and_then(Value::as_str).unwrap_or_default().to_owned();
        let metric = r.get("metric").and_then(Value::as_str).unwrap_or_default().to_owned();
        if !runs.contains(&run) {
            runs.push(run.clone());
        }
        if !metrics.contains(&metric) {
            metrics.push(metric.clone());
        }
        let ours = r.get("error").or(r.get("err")).and_then(Value::as_f64);
        let blis = r.get("blis_error").or(r.get("blis_err")).and_then(Value::as_f64);
        cells.insert((run, metric), (ours, blis));
    }
    html.push_str("<h2>Calibration against real vLLM runs</h2><p>sim / real − 1; BLIS's published error in parentheses.</p><table id=\"calibration\"><tr><th>run</th>");
    for m in &metrics {
        let _ = write!(html, "<th>{}</th>", escape(m));
    }
    html.push_str("</tr>");
    for run in &runs {
        let _ = write!(html, "<tr><td class=\"l\">{}</td>", escape(run));
        for m in &metrics {
            let (ours, blis) = cells.get(&(run.clone(), m.clone())).copied().unwrap_or_default();
            // Green within 5 %, red from 50 %.
            let shade = |e: f64| {
                let t = (e.abs() / 0.5).min(1.0);
                format!("rgb({},{},{})", (200.0 + 55.0 * t) as u8, (230.0 - 130.0 * t) as u8, (200.0 - 100.0 * t) as u8)
            };
            match ours {
                Some(e) => {
                    let b = blis.map_or_else(String::new, |b| format!(" ({:+.1} %)", b * 100.0));
                    let _ = write!(html, "<td style=\"background:{}\">{:+.1} %{}</td>", shade(e), e * 100.0, b);
                }
                None => html.push_str("<td>–</td>"),
            }
        }
        html.push_str("</tr>");
    }
    html.push_str("</table>");
    Ok(())
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
