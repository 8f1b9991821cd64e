//! `blis-sweep import FORMAT PATH -o W.jsonl`: a trace in a format users
//! already have, written as workload JSONL (`run --input FORMAT:PATH` reads
//! it without this step). Also the flags every importer takes, shared with
//! `run`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;

use super::atomic;
use crate::workload::import::common::{ImportError, ImportOptions, MAX_POOL_SESSIONS, SessionMode};
use crate::workload::import::{self, ImportFormat};
use crate::workload::writer::write_workload_row;

/// Flags of the importers (`run --input`, `import`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ImportFlags {
    /// Sessions started per second (Poisson), for traces whose sessions carry
    /// no start times of one run (agent-calls, weka, sharegpt; otel's
    /// recorded starts replaced).
    #[arg(long, value_name = "PER_S")]
    session_rate: Option<f64>,
    /// How sessions are replayed: fixed (every record at its recorded time;
    /// tracev2's default), closed-loop (a session is one request DAG, each
    /// call after the ones it follows; agent-calls' default) or
    /// fixed-accumulate (each call at its recorded time, with its session's
    /// growing context).
    #[arg(long, value_name = "MODE")]
    session_mode: Option<String>,
    /// Seeds session arrivals, --shuffle-corpus and (run, observe) the
    /// generator of --workload-spec.
    #[arg(long, value_name = "N", default_value_t = 0)]
    seed: u64,
    /// TraceV2 (as blis replay): replay a pool of N sessions at once, closed
    /// loop, a new session admitted as one completes.
    #[arg(long, value_name = "N")]
    concurrent_sessions: Option<u32>,
    /// With --concurrent-sessions: sessions in all (the corpus cloned to fill).
    #[arg(long, value_name = "M", requires = "concurrent_sessions")]
    total_sessions: Option<u32>,
    /// With --concurrent-sessions: shuffle the corpus first (seeded Fisher–Yates).
    #[arg(long, requires = "concurrent_sessions")]
    shuffle_corpus: bool,
    /// Weka: replay the main agent alone, leaving its subagents out (BLIS's
    /// replay, for comparison).
    #[arg(long)]
    drop_subagents: bool,
    /// Session traces (otel, weka): cap each think time between a session's
    /// calls at S seconds (0 = uncapped; otel's default 15, weka's uncapped).
    #[arg(long, value_name = "S")]
    max_think_time: Option<f64>,
}

impl ImportFlags {
    /// The first flag given that only an importer reads (sessions of a
    /// trace), for refusing it beside a workload file or a generator.
    pub(crate) fn trace_only_flag(&self) -> Option<&'static str> {
        [
            ("--concurrent-sessions", self.concurrent_sessions.is_some()),
            ("--session-rate", self.session_rate.is_some()),
            ("--session-mode", self.session_mode.is_some()),
            ("--drop-subagents", self.drop_subagents),
            ("--max-think-time", self.max_think_time.is_some()),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag))
    }

    pub(crate) fn options(&self) -> anyhow::Result<ImportOptions> {
        let session_mode = self
            .session_mode
            .as_deref()
            .map(SessionMode::parse)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--session-mode: {e}"))?;
        if self.concurrent_sessions == Some(0) {
            anyhow::bail!("--concurrent-sessions: must be at least 1");
        }
        if self.total_sessions == Some(0) {
            anyhow::bail!("--total-sessions: must be at least 1");
        }
        if let Some(m) = self.total_sessions.filter(|&m| m > MAX_POOL_SESSIONS) {
            anyhow::bail!("--total-sessions: {m} is more than a pool replays (at most {})", MAX_POOL_SESSIONS);
        }
        Ok(ImportOptions {
            session_rate: self.session_rate,
            session_mode,
            seed: self.seed,
            trace_data: None,
            concurrent_sessions: self.concurrent_sessions,
            total_sessions: self.total_sessions,
            shuffle_corpus: self.shuffle_corpus,
            adapters: false,
            priorities: false,
            drop_subagents: self.drop_subagents,
            agentic: None,
            max_think_time: self.max_think_time,
        })
    }
}

/// `FORMAT:PATH`, as `--input` takes it.
/// An importer's error about a value given on the command line names the
/// flag it came from (the importer, shared with plans, names the field).
pub(crate) fn flag_error(e: ImportError) -> anyhow::Error {
    let flag = match e.column.as_str() {
        "session_rate" => "--session-rate",
        "total_sessions" => "--total-sessions",
        "max_think_time" => "--max-think-time",
        _ => return anyhow::Error::new(e),
    };
    anyhow::anyhow!("{flag}: {} ({})", e.reason, e.file)
}

pub(crate) fn parse_input(text: &str) -> anyhow::Result<(ImportFormat, PathBuf)> {
    let (format, path) = text
        .split_once(':')
        .filter(|(_, p)| !p.is_empty())
        .ok_or_else(|| anyhow::anyhow!("--input: `{text}`: give FORMAT:PATH, e.g. mooncake:trace.jsonl"))?;
    let format = ImportFormat::parse(format).map_err(|e| anyhow::anyhow!("--input: {e}"))?;
    Ok((format, PathBuf::from(path)))
}

#[derive(Debug, clap::Args)]
pub(crate) struct ImportArgs {
    #[arg(value_name = "FORMAT", help = ImportFormat::help())]
    format: String,
    /// The trace file.
    #[arg(value_name = "PATH")]
    path: PathBuf,
    /// Workload JSONL (written atomically).
    #[arg(short = 'o', long, value_name = "W.jsonl")]
    output: PathBuf,
    #[command(flatten)]
    flags: ImportFlags,
}

pub(crate) fn run(args: ImportArgs) -> anyhow::Result<()> {
    let format = ImportFormat::parse(&args.format).map_err(anyhow::Error::msg)?;
    let options = args.flags.options()?;
    let beside = (format == ImportFormat::TraceV2).then(|| import::tracev2::data_path(&args.path));
    let mut inputs = vec![atomic::Named::given("PATH", &args.path)];
    inputs.extend(beside.as_deref().map(|data| atomic::Named::given("PATH (its TraceV2 data)", data)));
    atomic::check_distinct(&[atomic::Named::given("-o", &args.output)], &inputs)?;
    let mut out = atomic::create(&args.output)?;
    let name = args.output.display().to_string();
    let mut buf = Vec::with_capacity(1 << 21);
    let mut n = 0u64;
    for request in import::open(format, &args.path, &options).map_err(flag_error)? {
        write_workload_row(&mut buf, &request?);
        n += 1;
        if buf.len() >= 1 << 20 {
            out.write_all(&buf).with_context(|| format!("{name}: write failed"))?;
            buf.clear();
        }
    }
    out.write_all(&buf).with_context(|| format!("{name}: write failed"))?;
    atomic::commit(out)?;
    say!("{}: {n} requests -> {name}", args.path.display());
    if format == ImportFormat::Mooncake {
        let reuse = import::mooncake::block_reuse(&args.path)?;
        say!("  block reuse: {:.1} % of hash ids were seen in an earlier request", reuse * 100.0);
    }
    if format == ImportFormat::VllmBench {
        for note in import::vllm_bench::convert(&args.path, options.seed)?.notes {
            say!("  note: {note}");
        }
    }
    Ok(())
}
