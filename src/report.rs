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
mod svg;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::metrics::{Metrics, Slo};
use svg::{Series, bar_chart, escape, line_chart};

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
    rate_scale: f64,
    status: String,
    metrics: Option<Metrics>,
}

impl Run {
    /// The run's concurrency as the runs table shows it.
    fn concurrency_text(&self) -> String {
        self.concurrency.map_or_else(|| "open".to_owned(), |c| c.to_string())
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
        runs.push(Run {
            run_id,
            deployment,
            concurrency: r["concurrency"].as_u64(),
            rate_scale: r["rate_scale"].as_f64().unwrap_or(1.0),
            status,
            metrics,
        });
    }
    // Each distinct load is its own point: the x axis is one load setting,
    // every other one (and the deployment, overrides included) splits the
    // series, and only seeds — repeats of the same load — are averaged. The
    // x axis is the concurrency (users, or a cap on requests in flight)
    // when the runs have one and the rate scale does not vary; open-loop
    // runs among them are drawn past the largest cap, at a tick that says
    // "open loop" (no cap: the limit a growing cap tends to). Otherwise it
    // is the offered load, with open loop and each cap a series of its own.
    let mut rate_scales: Vec<u64> = runs.iter().map(|r| r.rate_scale.to_bits()).collect();
    rate_scales.sort_unstable();
    rate_scales.dedup();
    let mut caps: Vec<u64> = runs.iter().filter_map(|r| r.concurrency).collect();
    caps.sort_unstable();
    caps.dedup();
    let open = runs.iter().any(|r| r.concurrency.is_none());
    let by_users = !caps.is_empty() && (!open || rate_scales.len() == 1);
    let open_x = caps.last().map_or(1.0, |&c| 2.0 * c as f64);
    let mut x_ticks: Vec<(f64, String)> = Vec::new();
    if by_users && open {
        // At most 8 labelled caps (every k-th, the largest always), then open loop.
        let step = caps.len().div_ceil(8);
        let last = caps.len() - 1;
        x_ticks = caps
            .iter()
            .enumerate()
            .filter(|(i, _)| (last - i).is_multiple_of(step))
            .map(|(_, &c)| (c as f64, c.to_string()))
            .collect();
        x_ticks.push((open_x, "open loop".to_owned()));
    }
    let x_label = match (by_users, open) {
        (true, false) => "concurrency (users, or requests in flight at most)",
        (true, true) => "concurrency cap (requests in flight at most; open loop: none)",
        (false, _) => "offered load (× the workload's arrival rate)",
    };
    let capped = !caps.is_empty();
    // Series key: deployment, then the load setting not on the x axis (open
    // loop after every cap); points: x → the runs' metrics (one per seed).
    type Key = (String, u64, u64);
    let mut by: BTreeMap<Key, BTreeMap<u64, Vec<&Metrics>>> = BTreeMap::new();
    for r in &runs {
        let Some(m) = &r.metrics else { continue };
        let cap = r.concurrency.unwrap_or(u64::MAX);
        let (key, x) = if by_users {
            ((r.deployment.clone(), 0, r.rate_scale.to_bits()), r.concurrency.map_or(open_x, |c| c as f64))
        } else {
            ((r.deployment.clone(), cap, 0), r.rate_scale)
        };
        by.entry(key).or_default().entry(x.to_bits()).or_default().push(m);
    }
    let series_name = |(deployment, cap, rate): &Key| {
        let mut name = deployment.clone();
        if by_users && rate_scales.len() > 1 {
            let _ = write!(name, " rate ×{}", f64::from_bits(*rate));
        } else if !by_users && capped {
            name.push_str(&if *cap == u64::MAX { " open loop".to_owned() } else { format!(" ≤ {cap} in flight") });
        }
        name
    };
    let curve = |stat: &dyn Fn(&Metrics) -> f64, suffix: &str, dashed: bool| -> Vec<Series> {
        by.iter()
            .map(|(key, loads)| Series {
                name: format!("{}{suffix}", series_name(key)),
                points: loads
                    .iter()
                    .map(|(x, ms)| (f64::from_bits(*x), ms.iter().map(|m| stat(m)).sum::<f64>() / ms.len() as f64))
                    .collect(),
                dashed,
            })
            .collect()
    };
    let pair = |p99: &dyn Fn(&Metrics) -> f64, p50: &dyn Fn(&Metrics) -> f64| {
        let mut s = Vec::new();
        for (a, b) in curve(p99, " p99", false).into_iter().zip(curve(p50, " p50", true)) {
            s.push(a);
            s.push(b);
        }
        s
    };
    let target =
        |name: &str, v: Option<f64>| v.map(|v| (format!("SLO {name} {v} ms"), v)).into_iter().collect::<Vec<_>>();
    html.push_str("<h2>Latency against load</h2><div class=\"charts\">");
    type Stat = fn(&Metrics) -> f64;
    let tpot = slo.and_then(|s| s.tpot_p99_ms);
    let charts: [(&str, &str, Stat, Stat, Option<f64>); 4] = [
        ("ttft", "TTFT", |m| m.ttft_p99_ms, |m| m.ttft_p50_ms, slo.and_then(|s| s.ttft_p99_ms)),
        ("itl", "ITL", |m| m.itl_p99_ms, |m| m.itl_p50_ms, slo.and_then(|s| s.itl_p99_ms)),
        ("tpot", "TPOT", |m| m.tpot_p99_ms, |m| m.tpot_p50_ms, tpot),
        ("e2e", "E2E", |m| m.e2e_p99_ms, |m| m.e2e_p50_ms, slo.and_then(|s| s.e2e_p99_ms)),
    ];
    // TPOT's chart only with a TPOT target: other reports stay as they were.
    for (id, title, p99, p50, slo_ms) in charts.into_iter().filter(|c| c.0 != "tpot" || tpot.is_some()) {
        html.push_str(&line_chart(id, title, x_label, &x_ticks, "ms", &pair(&p99, &p50), &target(title, slo_ms)));
    }
    html.push_str("</div><h2>Throughput and goodput</h2><div class=\"charts\">");
    let mut throughput = Vec::new();
    for (a, b) in curve(&|m| m.responses_per_sec, " served", false).into_iter().zip(curve(
        &|m| m.goodput_rps.unwrap_or(f64::NAN),
        " goodput",
        true,
    )) {
        throughput.push(a);
        if b.points.iter().all(|p| p.1.is_finite()) {
            throughput.push(b);
        }
    }
    html.push_str(&line_chart(
        "throughput",
        "Requests served and goodput",
        x_label,
        &x_ticks,
        "req/s",
        &throughput,
        &[],
    ));
    html.push_str("</div>");
    autoscale::section(runs.iter().filter_map(|r| Some((r.run_id.as_str(), r.metrics.as_ref()?))), html);
    let capacity = dir.join("capacity.parquet");
    if capacity.exists() {
        capacity_section(&capacity, html)?;
    }
    let classes = dir.join("classes.parquet");
    if classes.exists() {
        classes::section(&classes, &runs, html)?;
    }
    // The runs.
    html.push_str(
        "<h2>Runs</h2><table id=\"runs\"><tr><th>run</th><th>deployment</th><th>latency model</th><th>concurrency</th><th>rate ×</th>\
                   <th>status</th><th>TTFT p99 ms</th><th>ITL p99 ms</th><th>E2E p99 ms</th><th>req/s</th><th>goodput</th></tr>",
    );
    for r in &runs {
        let m = r.metrics.as_ref();
        let f = |v: Option<f64>| v.map_or_else(|| "–".to_owned(), |v| format!("{v:.1}"));
        let _ = write!(
            html,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&r.run_id),
            escape(&r.deployment),
            escape(&latency_model(m)),
            r.concurrency_text(),
            r.rate_scale,
            escape(&r.status),
            f(m.map(|m| m.ttft_p99_ms)),
            f(m.map(|m| m.itl_p99_ms)),
            f(m.map(|m| m.e2e_p99_ms)),
            f(m.map(|m| m.responses_per_sec)),
            f(m.and_then(|m| m.goodput_rps)),
        );
    }
    html.push_str("</table>");
    Ok(())
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
    for batch in decode(path)? {
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
fn decode(path: &Path) -> Result<Vec<arrow_array::RecordBatch>, ReportError> {
    let read = || -> Result<Vec<arrow_array::RecordBatch>, ReportError> {
        let file = std::fs::File::open(path).map_err(|e| file_err(path, e))?;
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .and_then(|b| b.build())
            .map_err(|e| file_err(path, e))?;
        reader.map(|batch| batch.map_err(|e| file_err(path, e))).collect()
    };
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(read);
    std::panic::set_hook(previous);
    result.unwrap_or_else(|_| Err(file_err(path, "not a readable Parquet table (its data is corrupt)")))
}

fn capacity_section(path: &Path, html: &mut String) -> Result<(), ReportError> {
    let rows = read_rows(path)?;
    let users = rows.first().is_some_and(|r| r.contains_key("max_concurrency"));
    let key = if users { "max_concurrency" } else { "max_rate" };
    let mut bars = Vec::new();
    for r in &rows {
        // A column the table lacks reads as null (a table from elsewhere).
        let r = |k: &str| r.get(k).unwrap_or(&Value::Null);
        let mut label = r("scenario").as_str().unwrap_or_default().to_owned();
        let overrides = r("overrides").as_str().and_then(|o| serde_json::from_str::<Value>(o).ok());
        for (k, v) in overrides.as_ref().and_then(Value::as_object).into_iter().flatten() {
            let _ = write!(label, " {k}={}", v.as_str().map_or_else(|| v.to_string(), str::to_owned));
        }
        let gpus = r("gpus").as_i64().unwrap_or(0);
        let cost = r("cost_per_mtok").as_f64().map_or_else(String::new, |c| format!(", ${c:.2}/M tok"));
        let more = if r("at_least").as_bool() == Some(true) { "≥ " } else { "" };
        let max = r(key).as_f64();
        // The search's verdict (capacity.parquet from before it had one: none).
        let verdict = r("verdict").as_str().unwrap_or("capacity");
        let note = match (max, verdict) {
            (Some(m), "too_short") => format!("≥ {m:.2} (workload too short for more) · {gpus} GPUs"),
            (Some(m), _) => format!("{more}{m:.2} · {gpus} GPU{}{cost}", if gpus == 1 { "" } else { "s" }),
            (None, "failed") => "failed: a probe could not run".to_owned(),
            (None, "requests_failed") => format!("no load: too many requests fail · {gpus} GPUs"),
            (None, "too_short") => format!("workload too short · {gpus} GPUs"),
            (None, _) => format!("below the range · {gpus} GPUs"),
        };
        bars.push((label, max.unwrap_or(0.0), note));
    }
    html.push_str("<h2>Capacity</h2>");
    html.push_str(&bar_chart(
        "capacity",
        "Highest load within the SLO, per deployment",
        if users { "users" } else { "req/s" },
        &bars,
        None,
    ));
    Ok(())
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
