//! `blis-sweep agentx -s S.yaml CORPUS --lanes N`: an AgentX load (aiperf's
//! `inferencex-agentx-mvp`) over a Weka corpus on one deployment; result
//! JSONL (one row per play) and the window's report (JSON).

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use super::atomic::{self, AtomicFile};
use crate::agentx::{self, AgenticSpec, AgentxError};
use crate::output::JsonlWriter;
use crate::scenario;
use crate::workload::agentic::SnapshotSpec;
use crate::workload::import::weka;

#[derive(Debug, clap::Args)]
pub(crate) struct AgentxArgs {
    /// Scenario file (YAML or JSON).
    #[arg(long, short = 's', value_name = "S.yaml")]
    scenario: PathBuf,
    /// The Weka corpus: sessions as JSON lines, a session `.json`, or a folder of them.
    #[arg(value_name = "CORPUS")]
    corpus: PathBuf,
    /// Plays in flight (aiperf's --concurrency under the scenario).
    #[arg(long, value_name = "N")]
    lanes: u32,
    /// The profile window, s, from the end of the warm-up.
    #[arg(long, value_name = "SECONDS", default_value_t = 1800.0)]
    profile: f64,
    /// Main turns of each lane's first play sent as warm-up.
    #[arg(long, value_name = "N", default_value_t = 10)]
    warmup_per_lane: u32,
    /// Where lanes' first plays start, as fractions of their session: MIN,MAX, or `none` (the first turn).
    #[arg(long, value_name = "MIN,MAX|none", default_value = "0,1")]
    snapshot: String,
    /// Idle gaps before a call capped at this, s, or `none`.
    #[arg(long, value_name = "SECONDS|none", default_value = "10")]
    idle_cap: String,
    /// Calls in flight get this long after the window, s.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    grace: f64,
    /// Replay the main agent alone (BLIS's replay).
    #[arg(long)]
    drop_subagents: bool,
    /// Seeds the snapshots.
    #[arg(long, value_name = "N", default_value_t = 0)]
    seed: u64,
    /// Result JSONL, one row per play (written atomically).
    #[arg(short = 'o', long, value_name = "RESULTS.jsonl")]
    output: Option<PathBuf>,
    /// The window's report, JSON (written atomically); without it, stdout.
    #[arg(long, value_name = "REPORT.json")]
    metrics: Option<PathBuf>,
    /// No summary on stderr.
    #[arg(long, short = 'q')]
    quiet: bool,
}

impl AgentxArgs {
    fn spec(&self) -> anyhow::Result<AgenticSpec> {
        let snapshot = match self.snapshot.as_str() {
            "none" => None,
            s => {
                let (lo, hi) = s
                    .split_once(',')
                    .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)))
                    .ok_or_else(|| anyhow::anyhow!("--snapshot: `{s}`: give MIN,MAX (fractions) or none"))?;
                Some(SnapshotSpec { min: lo, max: hi })
            }
        };
        let idle_cap_s = match self.idle_cap.as_str() {
            "none" => None,
            s => Some(s.parse().map_err(|_| anyhow::anyhow!("--idle-cap: `{s}`: give seconds or none"))?),
        };
        Ok(AgenticSpec {
            lanes: self.lanes,
            snapshot,
            warmup_per_lane: self.warmup_per_lane,
            profile_s: self.profile,
            idle_cap_s,
            grace_s: self.grace,
        })
    }
}

/// The flag each key of the spec comes from.
fn flag(key: &str) -> &'static str {
    match key {
        "lanes" => "--lanes",
        "snapshot" => "--snapshot",
        "profile_s" => "--profile",
        "idle_cap_s" => "--idle-cap",
        "grace_s" => "--grace",
        _ => "--warmup-per-lane",
    }
}

pub(crate) fn run(args: AgentxArgs) -> anyhow::Result<()> {
    check_paths(&args)?;
    let mut agentic = args.spec()?.resolve().map_err(|(k, r)| anyhow::anyhow!("{}: {r}", flag(&k)))?;
    agentic.drop_subagents = args.drop_subagents;
    let deployment = scenario::load(&args.scenario)?;
    let corpus: Arc<[_]> = weka::load(&args.corpus)?.into();
    agentx::check_corpus(&corpus).map_err(|e| anyhow::anyhow!("{}: {e}", args.corpus.display()))?;
    let mut results = args.output.as_deref().map(atomic::create).transpose()?;
    let name = args.output.as_ref().map_or(String::new(), |p| p.display().to_string());
    let report = {
        let mut writer = results.as_mut().map(|f| JsonlWriter::new(f as &mut dyn Write, name.clone()));
        agentx::run(&deployment.run_config(), corpus, &agentic, args.seed, &mut writer).map(|(r, _)| r).map_err(
            |e| match e {
                AgentxError::Clock(c) => anyhow::anyhow!("{}: {c}", args.corpus.display()),
                e => anyhow::Error::new(e),
            },
        )?
    };
    let mut files: Vec<AtomicFile> = results.into_iter().collect();
    let mut json = serde_json::to_string_pretty(&report).context("report")?;
    json.push('\n');
    match &args.metrics {
        Some(path) => {
            let mut f = atomic::create(path)?;
            f.write_all(json.as_bytes()).with_context(|| format!("{}: write failed", path.display()))?;
            files.push(f);
        }
        None => {
            let mut stdout = BufWriter::new(io::stdout().lock());
            stdout.write_all(json.as_bytes()).context("stdout")?;
            stdout.flush().context("stdout")?;
        }
    }
    atomic::commit_all(files)?;
    if !args.quiet {
        say!(
            "{} lanes over {} s of profile (warm-up ended at {:.1} s): {} calls, TTFT mean {:.0} ms p99 {:.0} ms, \
             ITL mean {:.1} ms, {:.0} output tok/s, prefix reuse {:.1} %",
            report.lanes,
            report.profile_s,
            report.warmup_end_s,
            report.calls,
            report.ttft_mean_ms,
            report.ttft_p99_ms,
            report.itl_mean_ms,
            report.output_tokens_per_sec,
            report.prefix_reuse * 100.0
        );
    }
    Ok(())
}

/// Refuses outputs that are one file, or an input, before anything is read
/// or written.
fn check_paths(args: &AgentxArgs) -> anyhow::Result<()> {
    use atomic::Named;
    let mut outputs = Vec::new();
    if let Some(path) = &args.output {
        outputs.push(Named::given("-o", path));
    }
    outputs.push(match &args.metrics {
        Some(path) => Named::given("--metrics", path),
        None => Named::stdout("--metrics"),
    });
    let inputs = [Named::given("-s", &args.scenario), Named::given("CORPUS", &args.corpus)];
    atomic::check_distinct(&outputs, &inputs)
}
