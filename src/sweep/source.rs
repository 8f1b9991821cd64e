//! Where a sweep's runs read their requests from: a plan's `workload:`
//! section resolved to a [`WorkloadSource`] (a workload file, a generator, an
//! imported trace), the key a run id takes from it (a file's content, not its
//! path; a generator's spec; an importer's options), and the one place a
//! run's requests are opened.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::error::PlanError;
use crate::hash::Fnv64;
use crate::workload::generate::{GenerateSpec, Generator};
use crate::workload::import::ImportFormat;
use crate::workload::import::common::{ImportOptions, SessionMode};

/// Where every run's requests come from.
#[derive(Debug, Clone)]
pub enum WorkloadSource {
    /// A workload JSONL file. Not a regular file (a FIFO, `/dev/stdin`): the
    /// sweep spools it once and points this at the copy.
    File(PathBuf),
    /// Generated anew for every run from the run's seed.
    Generate(Box<Generator>),
    /// A trace read by an importer for every run (the run's seed seeds it).
    Import {
        /// Its format.
        format: ImportFormat,
        /// The trace.
        path: PathBuf,
        /// Its options (the seed is each run's).
        options: ImportOptions,
    },
}

/// A workload's requests, in arrival order; a bad row ends them with its message.
pub(crate) type SourceRequests<'a> = Box<dyn Iterator<Item = Result<crate::workload::Request, String>> + 'a>;

/// Why a workload could not be opened.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// Its file.
    File(PathBuf, std::io::Error),
    /// An imported trace's first check.
    Import(crate::workload::import::common::ImportError),
}

impl WorkloadSource {
    /// The workload's own rate with `seed`, requests per second: requests − 1
    /// over the span of their arrivals (what a `rate_scale` of 1 offers; a
    /// capacity search divides its loads by it, the report multiplies).
    pub(crate) fn base_rate(&self, seed: u64) -> Result<f64, String> {
        let requests = self.requests(seed).map_err(|e| match e {
            OpenError::File(path, e) => format!("{}: {e}", path.display()),
            OpenError::Import(e) => e.to_string(),
        })?;
        let (mut n, mut first, mut last) = (0u64, u64::MAX, 0u64);
        for r in requests {
            let t = r?.arrival_us();
            first = first.min(t);
            last = last.max(t);
            n += 1;
        }
        if n < 2 || last == first {
            return Err(
                "a rate search needs a workload whose arrivals span some time (two or more requests)".to_owned()
            );
        }
        Ok((n - 1) as f64 / ((last - first) as f64 / 1e6))
    }

    /// The requests a run with `seed` reads (the one place a plan's workload
    /// is opened: runs and a capacity search's base rate).
    pub(crate) fn requests(&self, seed: u64) -> Result<SourceRequests<'_>, OpenError> {
        Ok(match self {
            WorkloadSource::File(path) => {
                let file = crate::spool::open(path).map_err(|e| OpenError::File(path.clone(), e))?;
                let reader = crate::workload::reader::Reader::new(
                    std::io::BufReader::with_capacity(1 << 20, file),
                    path.display().to_string(),
                    crate::workload::reader::Format::Workload,
                );
                Box::new(reader.map(|row| row.map_err(|e| e.to_string())))
            }
            WorkloadSource::Generate(g) => {
                Box::new(g.requests(seed).map(|r| r.map_err(|e| format!("workload.generate.{e}"))))
            }
            WorkloadSource::Import { format, path, options } => {
                let options = ImportOptions { seed, ..options.clone() };
                let requests = crate::workload::import::open(*format, path, &options).map_err(OpenError::Import)?;
                Box::new(requests.map(|r| r.map_err(|e| e.to_string())))
            }
        })
    }
}

/// What a run id says about a workload file: its content, not its path.
pub(super) fn file_key(content: u64) -> String {
    format!("file:{content:016x}")
}

/// Whether `path` exists but cannot be read twice: not a regular file (a
/// FIFO, a character device, `/dev/stdin` on a pipe). The sweep reads such a
/// workload once, when it runs, through [`crate::spool`].
pub(super) fn is_stream(path: &Path) -> bool {
    crate::spool::is_stream(path)
}

/// What a plan's `workload:` section reads requests from.
pub(super) fn workload_source(
    w: &super::plan::WorkloadSpec,
    base: &Path,
    invalid: &dyn Fn(&str, String) -> PlanError,
) -> Result<WorkloadSource, PlanError> {
    if w.import.is_none() {
        for (key, given) in [
            ("workload.session_rate", w.session_rate.is_some()),
            ("workload.session_mode", w.session_mode.is_some()),
            ("workload.max_think_time", w.max_think_time.is_some()),
            ("workload.concurrent_sessions", w.concurrent_sessions.is_some()),
            ("workload.total_sessions", w.total_sessions.is_some()),
            ("workload.shuffle_corpus", w.shuffle_corpus),
            ("workload.drop_subagents", w.drop_subagents),
            ("workload.agentic", w.agentic.is_some()),
        ] {
            if given {
                return Err(invalid(key, "only an imported trace (`import: FORMAT`) takes it".to_owned()));
            }
        }
    }
    Ok(match (&w.path, &w.generate) {
        (Some(path), None) if w.import.is_some() => {
            let name = w.import.as_deref().unwrap_or_default();
            let format = ImportFormat::parse(name).map_err(|e| invalid("workload.import", e))?;
            let session_mode = w
                .session_mode
                .as_deref()
                .map(SessionMode::parse)
                .transpose()
                .map_err(|e| invalid("workload.session_mode", e))?;
            if let Some(r) = w.session_rate
                && !(r.is_finite() && r > 0.0)
            {
                return Err(invalid("workload.session_rate", format!("{r} must be a positive number")));
            }
            if w.total_sessions.is_some() || w.shuffle_corpus {
                let n = w.concurrent_sessions;
                if n.is_none() {
                    return Err(invalid(
                        "workload.concurrent_sessions",
                        "total_sessions and shuffle_corpus need a pool: give concurrent_sessions".to_owned(),
                    ));
                }
            }
            for (key, v) in
                [("workload.concurrent_sessions", w.concurrent_sessions), ("workload.total_sessions", w.total_sessions)]
            {
                if v == Some(0) {
                    return Err(invalid(key, "must be at least 1".to_owned()));
                }
            }
            let agentic = match &w.agentic {
                Some(_) if format != ImportFormat::Weka => {
                    return Err(invalid(
                        "workload.agentic",
                        "an AgentX load plays Weka sessions: give import: weka".to_owned(),
                    ));
                }
                Some(a) => {
                    for (key, given) in [
                        ("workload.session_rate", w.session_rate.is_some()),
                        ("workload.concurrent_sessions", w.concurrent_sessions.is_some()),
                        ("workload.closed_loop", w.closed_loop),
                        ("workload.warmup", w.warmup.is_some()),
                        ("workload.ramp_s", w.ramp_s.is_some()),
                        // A client timeout would cut a whole play (hours), not a call.
                        ("workload.timeout", w.timeout.is_some()),
                    ] {
                        if given {
                            return Err(invalid(
                                key,
                                "an AgentX load sends its own plays (workload.agentic); leave it out".to_owned(),
                            ));
                        }
                    }
                    let mut resolved = a.resolve().map_err(|(k, r)| invalid(&format!("workload.agentic.{k}"), r))?;
                    resolved.drop_subagents = w.drop_subagents;
                    Some(resolved)
                }
                None => None,
            };
            let options = ImportOptions {
                agentic,
                session_rate: w.session_rate,
                session_mode,
                concurrent_sessions: w.concurrent_sessions,
                total_sessions: w.total_sessions,
                shuffle_corpus: w.shuffle_corpus,
                drop_subagents: w.drop_subagents,
                max_think_time: w.max_think_time,
                ..ImportOptions::default()
            };
            WorkloadSource::Import { format, path: base.join(path), options }
        }
        (None, None) if w.import.is_some() => {
            return Err(invalid("workload.import", "give the trace as `path`".to_owned()));
        }
        (Some(path), None) => WorkloadSource::File(base.join(path)),
        (None, Some(value)) => {
            let spec: GenerateSpec =
                serde_json::from_value(value.clone()).map_err(|e| invalid("workload.generate", e.to_string()))?;
            let generator = Generator::new(&spec, base)
                .map_err(|e| invalid(&format!("workload.generate.{}", e.field), e.reason))?;
            WorkloadSource::Generate(Box::new(generator))
        }
        _ => return Err(invalid("workload", "give exactly one of `path` and `generate`".to_owned())),
    })
}

/// What a run id says about a workload that is not a plain file.
pub(super) fn source_key(
    source: &WorkloadSource,
    generate: Option<&Value>,
    invalid: &dyn Fn(&str, String) -> PlanError,
) -> Result<String, PlanError> {
    Ok(match (source, generate) {
        (WorkloadSource::File(path), _) if is_stream(path) => format!("unread:{}", path.display()),
        (WorkloadSource::File(path), _) => {
            let content = hash_file(path)
                .map_err(|e| invalid("workload.path", format!("{}: cannot read: {e}", path.display())))?;
            file_key(content)
        }
        (WorkloadSource::Generate(_), Some(value)) => format!("generate:{value}"),
        (WorkloadSource::Generate(_), None) => "generate".to_owned(),
        (WorkloadSource::Import { format, path, options }, _) => {
            let content = hash_file(path)
                .map_err(|e| invalid("workload.path", format!("{}: cannot read: {e}", path.display())))?;
            let pool = match options.concurrent_sessions {
                // Only when a pool is asked for, so other ids stay put.
                Some(n) => format!(":pool{n}:{:?}:{}", options.total_sessions, options.shuffle_corpus),
                None => String::new(),
            };
            // Only when set, so other ids stay put.
            let pool = if options.drop_subagents { format!("{pool}:drop-subagents") } else { pool };
            let pool = match &options.agentic {
                Some(a) => format!("{pool}:agentic{a:?}"),
                None => pool,
            };
            // Only when given, so other ids stay put.
            let think = options.max_think_time.map_or(String::new(), |s| format!(":think{s}"));
            format!(
                "import:{}:{:?}:{}:{}{pool}{think}",
                format.name(),
                options.session_rate,
                options.session_mode.map_or("default", SessionMode::name),
                file_key(content)
            )
        }
    })
}

/// Workload keys a grid override may vary, run by run.
pub(super) fn is_workload_parameter(key: &str) -> bool {
    key.starts_with("workload.generate.")
        || key.starts_with("workload.agentic.")
        || [
            "workload.session_rate",
            "workload.session_mode",
            "workload.concurrent_sessions",
            "workload.total_sessions",
            "workload.shuffle_corpus",
            "workload.drop_subagents",
        ]
        .contains(&key)
}

/// `workload.warmup` and `workload.ramp_s`, checked.
pub(super) fn measurement(w: &super::plan::WorkloadSpec) -> Result<crate::sim::Measurement, (&'static str, String)> {
    use crate::sim::{Measurement, Warmup};
    let seconds = |key: &'static str, s: f64| crate::workload::checked_seconds_to_us(s).map_err(|reason| (key, reason));
    let warmup = match w.warmup {
        None => Warmup::Auto,
        Some(super::plan::WarmupSpec { requests: Some(n), seconds: None }) => Warmup::Requests(n),
        Some(super::plan::WarmupSpec { requests: None, seconds: Some(s) }) => {
            Warmup::Micros(seconds("workload.warmup.seconds", s)?)
        }
        Some(_) => return Err(("workload.warmup", "give one of {requests: N} or {seconds: S}".to_owned())),
    };
    let ramp_us = match w.ramp_s {
        None => 0,
        Some(_) if !w.closed_loop => {
            return Err(("workload.ramp_s", "only a closed loop's users ramp up".to_owned()));
        }
        Some(s) => seconds("workload.ramp_s", s)?,
    };
    Ok(Measurement { warmup, ramp_us })
}

/// [`crate::hash::hash64`] of a file's bytes, read in 64 KiB pieces (never whole); a
/// pipe or FIFO through its copy ([`crate::spool`]), which the runs read.
fn hash_file(path: &Path) -> std::io::Result<u64> {
    let mut h = Fnv64::new();
    if path.is_dir() {
        // A folder of traces (weka, otel, servegen): its files' names and
        // contents, by name.
        let mut names: Vec<PathBuf> =
            std::fs::read_dir(path)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
        names.sort();
        for name in names.iter().filter(|p| p.is_file()) {
            h.update(name.file_name().unwrap_or_default().as_encoded_bytes());
            hash_into(&mut h, name)?;
        }
    } else {
        hash_into(&mut h, path)?;
    }
    Ok(h.finish())
}

fn hash_into(h: &mut Fnv64, path: &Path) -> std::io::Result<()> {
    use std::io::Read;
    let mut file = crate::spool::open(path)?;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}
