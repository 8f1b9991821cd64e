//! Resolves a [`PlanSpec`] into the runs of the sweep: the Cartesian product
//! of scenarios × concurrency × seed × rate_scale × override values, each
//! with a stable `run_id` hashed from everything that shapes its results:
//! the run's parameters, its scenario's content and the workload's *content*
//! (a workload file's bytes, read streaming; a generated workload's spec), so
//! a workload rewritten in place gives new ids and moving it keeps them.
//! What else decides whether a finished run can be reused (the tool version,
//! the outputs it wrote) is recorded beside it, see [`super::resume`].
//!
//! Plan errors (a missing file, an unknown key, a value of the wrong type,
//! in the plan, a scenario or an override) are found here, before any run
//! starts. A value that is well-formed but unusable for one cell (a `tp` that
//! does not divide that model's heads) is left for the run to report.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::error::PlanError;
use super::plan::{GridSpec, PlanSpec};
use super::source::{
    WorkloadSource, file_key, is_stream, is_workload_parameter, measurement, source_key, workload_source,
};
use crate::hash::{Fnv64, hash64};
use crate::scenario::ScenarioSpec;
use crate::sim::Client;

/// One run of the sweep.
#[derive(Debug, Clone)]
pub struct Cell {
    /// Position in the expanded grid.
    pub index: usize,
    /// Stable id: 16 hex digits hashed from the parameters below, the
    /// scenario's content and the workload.
    pub run_id: String,
    /// Scenario name.
    pub scenario: String,
    /// `None` = open loop.
    pub concurrency: Option<u32>,
    /// Seed.
    pub seed: u64,
    /// Arrival-time divisor.
    pub rate_scale: f64,
    /// Override key → value, in key order.
    pub overrides: Vec<(String, Value)>,
    /// Its workload in [`Plan::workloads`], when overrides vary it; else the
    /// plan's.
    pub workload: Option<usize>,
    /// What its run id says of its workload.
    workload_key: String,
    /// The scenario with the overrides applied.
    pub spec: ScenarioSpec,
    /// Directory `model_config` paths are relative to.
    pub base: PathBuf,
    /// FNV state after hashing everything above but the workload: the
    /// `run_id` continues it with the workload's key (see [`Plan::set_workload_file`]).
    params: Fnv64,
}

impl Cell {
    /// This run at another offered load (a capacity search's probe): its
    /// arrivals divided by `rate_scale`, or `concurrency` users; its own id.
    pub fn probe(&self, index: usize, rate_scale: f64, concurrency: Option<u32>) -> Cell {
        let mut params = self.params;
        params.update(format!("\nprobe rate_scale={rate_scale} concurrency={concurrency:?}").as_bytes());
        Cell { index, run_id: run_id(params, &self.workload_key), params, rate_scale, concurrency, ..self.clone() }
    }

    /// The client the run uses.
    pub fn client(&self, plan: &Plan) -> Client {
        // A pool of sessions is its own client: N admitted at a time.
        if let WorkloadSource::Import { options, .. } = plan.workload_of(self)
            && let Some(limit) = options.concurrent_sessions
        {
            return Client::Capped { limit };
        }
        match (self.concurrency, plan.closed_loop) {
            (None, _) => Client::OpenLoop,
            (Some(limit), false) => Client::Capped { limit },
            (Some(users), true) => Client::ClosedLoop { users, think_time_us: plan.think_time_us },
        }
    }
}

/// A resolved plan.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Sweep name.
    pub name: String,
    /// The plan file.
    pub file: PathBuf,
    /// Output directory.
    pub output: PathBuf,
    /// Where requests come from.
    pub workload: WorkloadSource,
    /// Latency targets every run is judged by (over its scenario's).
    pub slo: Option<crate::metrics::Slo>,
    /// A capacity search over the deployments, when the plan asks for one.
    pub search: Option<super::plan::Search>,
    /// The workloads grid overrides make (`workload.generate.*`, …), which
    /// runs name by index.
    pub workloads: Vec<WorkloadSource>,
    /// Closed-loop client (with `concurrency` users).
    pub closed_loop: bool,
    /// Closed loop think time, µs.
    pub think_time_us: u64,
    /// The client's request timeout, µs.
    pub timeout_us: Option<u64>,
    /// Warm-up and ramp: the window SLOs and capacity are judged on.
    pub measurement: crate::sim::Measurement,
    /// Override keys, in order (one column each in the tables).
    pub override_keys: Vec<String>,
    /// The runs, in grid order.
    pub cells: Vec<Cell>,
    /// Hash of the plan file's bytes and every scenario it names.
    pub plan_hash: String,
}

fn parse_yaml<T: serde::de::DeserializeOwned>(file: &Path, text: &str) -> Result<T, PlanError> {
    Ok(crate::yaml::parse_file(file, text)?)
}

fn read(path: &Path) -> Result<String, PlanError> {
    Ok(crate::yaml::read_file(path)?)
}

/// Sets `path` (dot-separated keys) in a JSON object, creating maps on the way.
pub(crate) fn set_path(target: &mut Value, path: &str, value: Value) {
    let mut node = target;
    let mut keys = path.split('.').peekable();
    while let Some(key) = keys.next() {
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        let map = node.as_object_mut().expect("made an object");
        if keys.peek().is_none() {
            map.insert(key.to_owned(), value);
            return;
        }
        node = map.entry(key.to_owned()).or_insert_with(|| Value::Object(Map::new()));
    }
}

/// An override under `pools.<name>.` changes a pool the scenario has; it
/// must not add one (a pool made of one key has no role, or takes its role
/// from its name, and runs beside the scenario's own).
fn check_pool(scenario: &Value, key: &str, name: &str) -> Result<(), String> {
    let Some(pool) = key.strip_prefix("pools.").and_then(|k| k.split('.').next()) else { return Ok(()) };
    let pools = scenario.get("pools").and_then(Value::as_object);
    if pools.is_some_and(|p| p.contains_key(pool)) {
        return Ok(());
    }
    let has = match pools {
        Some(p) => format!("its pools are {}", p.keys().map(String::as_str).collect::<Vec<_>>().join(", ")),
        None => "it has no `pools:`".to_owned(),
    };
    Err(format!("scenario `{name}` has no pool `{pool}` ({has}); an override changes a pool, it does not add one"))
}

/// Reads and resolves a plan file.
pub fn load(file: &Path) -> Result<Plan, PlanError> {
    let text = read(file)?;
    let spec: PlanSpec = parse_yaml(file, &text)?;
    resolve(spec, file, &text)
}

/// The most runs a plan expands to. A run's cell holds its scenario and
/// overrides (a plan of 10^5 runs holds tens of MB), and 10^6 runs of even a
/// second each are 11 days of one core: more is a typo in the grid.
pub const MAX_PLAN_RUNS: u64 = 1_000_000;

fn resolve(spec: PlanSpec, file: &Path, text: &str) -> Result<Plan, PlanError> {
    let base = file.parent().unwrap_or(Path::new(".")).to_path_buf();
    let invalid = |field: &str, reason: String| PlanError::Invalid {
        file: crate::yaml::locate(file, text, field),
        field: field.to_owned(),
        reason,
    };
    let workload = workload_source(&spec.workload, &base, &invalid)?;
    let search = spec.search.as_ref().map(|s| s.resolve().map_err(|(k, r)| invalid(&k, r))).transpose()?;
    if search.is_some() {
        // The search sets the load itself.
        if spec.grid.rate_scale != [1.0] {
            return Err(invalid("grid.rate_scale", "a capacity search sets the load: leave rate_scale out".to_owned()));
        }
        if spec.grid.concurrency.iter().any(Option::is_some) {
            return Err(invalid(
                "grid.concurrency",
                "a capacity search sets the load: leave concurrency out".to_owned(),
            ));
        }
    }
    if spec.workload.agentic.is_some() {
        // Its lanes are the load: no other axis of load beside them.
        let clash = if search.is_some() {
            Some(("search", "a capacity search over an AgentX load is not built; vary workload.agentic.lanes"))
        } else if spec.grid.concurrency.iter().any(Option::is_some) {
            Some(("grid.concurrency", "an AgentX load's lanes are its client; vary workload.agentic.lanes instead"))
        } else if spec.grid.rate_scale != [1.0] {
            Some(("grid.rate_scale", "an AgentX load has no arrival rate; vary workload.agentic.lanes instead"))
        } else {
            None
        };
        if let Some((key, reason)) = clash {
            return Err(invalid(key, reason.to_owned()));
        }
    }
    if let Some(slo) = &spec.slo {
        slo.validate().map_err(|(key, reason)| invalid(&format!("slo.{key}"), reason))?;
    }
    // A pool of sessions is the client: no concurrency axis beside it.
    let pool_clash = |source: &WorkloadSource| {
        matches!(source, WorkloadSource::Import { options, .. } if options.concurrent_sessions.is_some())
            && spec.grid.concurrency.iter().any(Option::is_some)
    };
    if pool_clash(&workload) {
        return Err(invalid(
            "grid.concurrency",
            "a pool of concurrent_sessions is the runs' client; leave concurrency open (null)".to_owned(),
        ));
    }
    let think_time = spec.workload.think_time.unwrap_or(0.0);
    if let Err(reason) = crate::workload::checked_seconds_to_us(think_time) {
        return Err(invalid("workload.think_time", reason));
    }
    if spec.workload.think_time.is_some() && !spec.workload.closed_loop {
        return Err(invalid("workload.think_time", "only a closed loop has a think time".to_owned()));
    }
    if let Some(t) = spec.workload.timeout
        && (t <= 0.0 || crate::workload::checked_seconds_to_us(t).is_err())
    {
        return Err(invalid("workload.timeout", format!("{t} is not a positive number of seconds up to 1e8")));
    }
    let measurement = measurement(&spec.workload).map_err(|(f, r)| invalid(f, r))?;
    // (A search over users sets the closed loop's count itself.)
    let counts_users = search.as_ref().is_some_and(|s| s.over == super::plan::Over::Concurrency);
    check_axes(&spec.grid, spec.workload.closed_loop && !counts_users).map_err(|(f, r)| invalid(f, r))?;
    if spec.scenarios.is_empty() {
        return Err(invalid("scenarios", "name at least one scenario".to_owned()));
    }
    // The runs the grid expands to, counted before any is built (a few
    // overrides of ten values each multiply to more cells than memory holds).
    let runs = [spec.scenarios.len(), spec.grid.concurrency.len(), spec.grid.seed.len(), spec.grid.rate_scale.len()]
        .into_iter()
        .chain(spec.grid.overrides.values().map(Vec::len))
        .try_fold(1u64, |n, k| n.checked_mul(k as u64))
        .unwrap_or(u64::MAX);
    if runs > MAX_PLAN_RUNS {
        return Err(invalid(
            "grid",
            format!("expands to {runs} runs, more than a plan holds (at most {MAX_PLAN_RUNS}); split it"),
        ));
    }

    // Each scenario: its JSON form (for overrides and hashing), name and base dir.
    let mut hash_input = text.to_owned();
    let mut scenarios = Vec::new();
    for (i, entry) in spec.scenarios.iter().enumerate() {
        let (value, name, dir) = match entry {
            Value::String(rel) => {
                let path = base.join(rel);
                // A scenario that cannot be read is the plan's error: its line names it.
                let text = read(&path).map_err(|e| invalid(&format!("scenarios[{i}]"), e.to_string()))?;
                // Strict first, for line numbers; then as a value for overrides.
                let _: ScenarioSpec = parse_yaml(&path, &text)?;
                let value: Value = parse_yaml(&path, &text)?;
                hash_input.push_str(&text);
                let stem =
                    path.file_stem().map_or_else(|| format!("scenario-{i}"), |s| s.to_string_lossy().into_owned());
                (value, stem, path.parent().unwrap_or(Path::new(".")).to_path_buf())
            }
            Value::Object(_) => {
                serde_json::from_value::<ScenarioSpec>(entry.clone())
                    .map_err(|e| invalid(&format!("scenarios[{i}]"), e.to_string()))?;
                (entry.clone(), format!("scenario-{i}"), base.clone())
            }
            other => {
                return Err(invalid(
                    &format!("scenarios[{i}]"),
                    format!("expected a file path or a mapping, got {other}"),
                ));
            }
        };
        let name = value.get("name").and_then(Value::as_str).map_or(name, str::to_owned);
        scenarios.push((value, name, dir));
    }

    let override_keys: Vec<String> = spec.grid.overrides.keys().cloned().collect();
    for (key, values) in &spec.grid.overrides {
        if values.is_empty() {
            return Err(invalid(&format!("grid.overrides.{key}"), "give at least one value".to_owned()));
        }
        if let Some((_, v)) = values.iter().enumerate().find(|(i, v)| values[..*i].contains(v)) {
            return Err(invalid(&format!("grid.overrides.{key}"), format!("{v} is given twice")));
        }
    }
    // Every combination of override values, in key order.
    let mut combos: Vec<Vec<(String, Value)>> = vec![Vec::new()];
    for (key, values) in &spec.grid.overrides {
        combos = combos
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push((key.clone(), v.clone()));
                    c
                })
            })
            .collect();
    }

    // A workload file that can be read twice is hashed now, so `blis-sweep
    // plan` prints the ids the sweep uses; one that cannot (a FIFO) only
    // when the sweep spools it, which calls `set_workload_file`.
    let workload_key = source_key(&workload, spec.workload.generate.as_ref(), &invalid)?;
    // Workload parameters as grid axes: one workload per distinct choice of
    // them, built once and shared by the runs that make it.
    for key in override_keys.iter().filter(|k| k.starts_with("workload.")) {
        if !is_workload_parameter(key) {
            return Err(invalid(
                &format!("grid.overrides.{key}"),
                "only workload.generate.*, workload.session_rate, workload.session_mode and the pool's \
                 workload.concurrent_sessions, total_sessions, shuffle_corpus vary run by run"
                    .to_owned(),
            ));
        }
    }
    let workload_value: Value =
        serde_json::to_value(parse_yaml::<Value>(file, text)?.get("workload").cloned()).expect("a value serializes");
    let mut workloads: Vec<(String, WorkloadSource, String)> = Vec::new();
    let mut cells = Vec::new();
    for (value, name, dir) in &scenarios {
        for combo in &combos {
            let mut scenario = value.clone();
            let mut varied = workload_value.clone();
            let mut any = false;
            for (key, v) in combo {
                match key.strip_prefix("workload.") {
                    Some(rest) => {
                        set_path(&mut varied, rest, v.clone());
                        any = true;
                    }
                    None => {
                        check_pool(&scenario, key, name).map_err(|r| invalid(&format!("grid.overrides.{key}"), r))?;
                        set_path(&mut scenario, key, v.clone());
                    }
                }
            }
            let cell_workload = if any {
                let tag = varied.to_string();
                let index = match workloads.iter().position(|(t, ..)| *t == tag) {
                    Some(i) => i,
                    None => {
                        let keys: Vec<&str> =
                            combo.iter().filter(|(k, _)| k.starts_with("workload.")).map(|(k, _)| k.as_str()).collect();
                        let at = |_: &str, reason: String| {
                            invalid("grid.overrides", format!("workload with {}: {reason}", keys.join(", ")))
                        };
                        let w: super::plan::WorkloadSpec =
                            serde_json::from_value(varied.clone()).map_err(|e| at("", e.to_string()))?;
                        let source = workload_source(&w, &base, &at)?;
                        if pool_clash(&source) {
                            return Err(at("", "a pool of concurrent_sessions needs grid.concurrency null".to_owned()));
                        }
                        let key = source_key(&source, w.generate.as_ref(), &at)?;
                        workloads.push((tag, source, key));
                        workloads.len() - 1
                    }
                };
                Some(index)
            } else {
                None
            };
            let cell_key = cell_workload.map_or(workload_key.as_str(), |i| workloads[i].2.as_str());
            let spec_value: ScenarioSpec = serde_json::from_value(scenario.clone()).map_err(|e| {
                // The override the scenario does not take on its own, named
                // with its line; else the combination.
                let alone = combo.iter().filter(|(k, _)| !k.starts_with("workload.")).find_map(|(key, v)| {
                    let mut one = value.clone();
                    set_path(&mut one, key, v.clone());
                    let e = serde_json::from_value::<ScenarioSpec>(one).err()?;
                    Some(invalid(&format!("grid.overrides.{key}"), format!("{v}: {e} (scenario `{name}`)")))
                });
                alone.unwrap_or_else(|| {
                    let keys: Vec<&str> = combo.iter().map(|(k, _)| k.as_str()).collect();
                    invalid("grid.overrides", format!("scenario `{name}` with {}: {e}", keys.join(", ")))
                })
            })?;
            let files = referenced_files(&spec_value, dir);
            for &concurrency in &spec.grid.concurrency {
                for &seed in &spec.grid.seed {
                    for &rate_scale in &spec.grid.rate_scale {
                        let mut identity = serde_json::json!({
                            "scenario": scenario,
                            "concurrency": concurrency,
                            "seed": seed,
                            "rate_scale": rate_scale,
                            "closed_loop": spec.workload.closed_loop,
                            "think_time": think_time,
                        });
                        // Only when set, so plans without one keep their run ids.
                        if let Some(t) = spec.workload.timeout {
                            identity["timeout"] = t.into();
                        }
                        if !measurement.is_default() {
                            identity["measurement"] = format!("{measurement:?}").into();
                        }
                        let mut params = Fnv64::new();
                        params.update(identity.to_string().as_bytes());
                        // The content of the files the scenario names, so an
                        // edited config.json or constants file gives new runs
                        // (only when there are some, so other ids stay put).
                        if let Some(files) = files {
                            params.update(&files.to_le_bytes());
                        }
                        cells.push(Cell {
                            index: cells.len(),
                            run_id: run_id(params, cell_key),
                            workload: cell_workload,
                            workload_key: cell_key.to_owned(),
                            params,
                            scenario: name.clone(),
                            concurrency,
                            seed,
                            rate_scale,
                            overrides: combo.clone(),
                            spec: spec_value.clone(),
                            base: dir.clone(),
                        });
                    }
                }
            }
        }
    }
    let mut ids: Vec<&str> = cells.iter().map(|c| c.run_id.as_str()).collect();
    ids.sort_unstable();
    if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
        // (Every axis is free of repeated values: two scenarios are one.)
        return Err(invalid(
            "scenarios",
            format!("two scenarios make runs with the same parameters (run_id {}); remove the duplicate", w[0]),
        ));
    }
    Ok(Plan {
        name: spec.name,
        file: file.to_path_buf(),
        output: base.join(&spec.output),
        workload,
        workloads: workloads.into_iter().map(|(_, source, _)| source).collect(),
        slo: spec.slo,
        search,
        closed_loop: spec.workload.closed_loop,
        think_time_us: crate::workload::seconds_to_us(think_time),
        timeout_us: spec.workload.timeout.map(crate::workload::seconds_to_us),
        measurement,
        override_keys,
        cells,
        plan_hash: format!("{:016x}", hash64(hash_input.as_bytes())),
    })
}

/// A cell's id: its parameters' hash continued with the workload's key.
fn run_id(params: Fnv64, workload_key: &str) -> String {
    let mut h = params;
    h.update(b"\nworkload=");
    h.update(workload_key.as_bytes());
    format!("{:016x}", h.finish())
}

impl Plan {
    /// Where `cell` reads its requests.
    pub fn workload_of(&self, cell: &Cell) -> &WorkloadSource {
        cell.workload.map_or(&self.workload, |i| &self.workloads[i])
    }

    /// Every run reads `path`, whose bytes hash to `content`: the ids follow.
    /// Used after a FIFO workload is spooled, and after the sweep's own read
    /// of a workload file (which is what the runs will see).
    pub fn set_workload_file(&mut self, path: PathBuf, content: u64) {
        let key = file_key(content);
        for cell in &mut self.cells {
            cell.run_id = run_id(cell.params, &key);
            cell.workload_key.clone_from(&key);
        }
        self.workload = WorkloadSource::File(path);
    }

    /// Whether the run ids wait for the workload to be read (a FIFO).
    pub fn workload_unread(&self) -> bool {
        matches!(&self.workload, WorkloadSource::File(path) if is_stream(path))
    }

    /// Why `cell`'s scenario cannot run, on one line: a value the grid
    /// overrides is named where the plan sets it (`PLAN:LINE:
    /// grid.overrides.KEY: reason`), any other by the scenario's name.
    pub(crate) fn scenario_error(&self, cell: &Cell, e: &crate::scenario::InvalidValue) -> String {
        match cell.overrides.iter().find(|(key, _)| *key == e.field) {
            Some((key, _)) => {
                // (Read again: only a failed run needs the text.)
                let text = std::fs::read_to_string(&self.file).unwrap_or_default();
                let field = format!("grid.overrides.{key}");
                let at = crate::yaml::locate(&self.file, &text, &field);
                format!("{at}: {field}: {} (scenario {})", e.reason, cell.scenario)
            }
            None => format!("scenario {}: {e}", cell.scenario),
        }
    }
}

/// A hash of the content of the files `spec` names (`model_config`, a
/// latency model's `constants_file`), relative to `dir`; `None` when it names
/// none. A file that cannot be read hashes as absent: the run reports it.
fn referenced_files(spec: &ScenarioSpec, dir: &Path) -> Option<u64> {
    let constants = match &spec.latency_model {
        Some(crate::scenario::LatencySpec::Roofline { constants_file, .. })
        | Some(crate::scenario::LatencySpec::Kernels { constants_file, .. }) => constants_file.as_deref(),
        _ => None,
    };
    let names: Vec<&str> = [spec.model_config.as_deref(), constants].into_iter().flatten().collect();
    if names.is_empty() {
        return None;
    }
    let mut h = Fnv64::new();
    for name in names {
        h.update(name.as_bytes());
        if let Ok(bytes) = std::fs::read(dir.join(name)) {
            h.update(&(bytes.len() as u64).to_le_bytes());
            h.update(&bytes);
        }
    }
    Some(h.finish())
}

fn check_axes(grid: &GridSpec, closed_loop: bool) -> Result<(), (&'static str, String)> {
    for (axis, empty) in [
        ("grid.concurrency", grid.concurrency.is_empty()),
        ("grid.seed", grid.seed.is_empty()),
        ("grid.rate_scale", grid.rate_scale.is_empty()),
    ] {
        if empty {
            return Err((axis, "give at least one value".to_owned()));
        }
    }
    // A value given twice makes two runs with the same id.
    let twice =
        |values: Vec<String>| values.iter().enumerate().find(|(i, v)| values[..*i].contains(v)).map(|(_, v)| v.clone());
    let show = |c: &Option<u32>| c.map_or_else(|| "null".to_owned(), |n| n.to_string());
    for (axis, repeated) in [
        ("grid.concurrency", twice(grid.concurrency.iter().map(show).collect())),
        ("grid.seed", twice(grid.seed.iter().map(u64::to_string).collect())),
        ("grid.rate_scale", twice(grid.rate_scale.iter().map(f64::to_string).collect())),
    ] {
        if let Some(v) = repeated {
            return Err((axis, format!("{v} is given twice")));
        }
    }
    if grid.concurrency.contains(&Some(0)) {
        return Err(("grid.concurrency", "0 is not a concurrency; use null for open loop".to_owned()));
    }
    if closed_loop && grid.concurrency.contains(&None) {
        return Err(("grid.concurrency", "a closed loop needs a number of users, not null".to_owned()));
    }
    if let Some(r) = grid.rate_scale.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        return Err(("grid.rate_scale", format!("{r} must be a positive number")));
    }
    Ok(())
}

/// The expanded grid as a table, for `blis-sweep plan`.
pub fn describe(plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}: {} runs -> {}", plan.name, plan.cells.len(), plan.output.display());
    if let (true, WorkloadSource::File(path)) = (plan.workload_unread(), &plan.workload) {
        let _ = writeln!(out, "(run ids below are provisional: {} is read once, when the sweep runs)", path.display());
    }
    let _ = write!(out, "run_id            scenario                       concurrency  seed  rate_scale");
    for key in &plan.override_keys {
        let _ = write!(out, "  {key}");
    }
    out.push('\n');
    for c in &plan.cells {
        let conc = c.concurrency.map_or_else(|| "open".to_owned(), |n| n.to_string());
        let _ = write!(out, "{}  {:<30} {:>11}  {:>4}  {:>10}", c.run_id, c.scenario, conc, c.seed, c.rate_scale);
        for (_, v) in &c.overrides {
            let _ = write!(out, "  {v}");
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_path_creates_nested_maps() {
        let mut v = serde_json::json!({"model": "x"});
        set_path(&mut v, "engine.max_num_seqs", Value::from(64));
        set_path(&mut v, "tp", Value::from(2));
        assert_eq!(v, serde_json::json!({"model": "x", "tp": 2, "engine": {"max_num_seqs": 64}}));
    }
}
