//! When a finished run is reused instead of run again. A run's folder holds
//! `status.json`, written last, which records the outcome, the tool version
//! that made it and the optional outputs it wrote. A run is reused only if
//! it finished `ok`, was made by this version of the tool (its run id already
//! covers its parameters, its scenario's content and the workload's content,
//! see [`super::grid`]), and wrote every output asked for now, all of which
//! are still there, its metrics readable. Anything else is run again, its
//! old files removed first ([`super::output_dir::Layout::discard`]), so that
//! every file of a run comes from one execution. Failed runs are always run
//! again: a failure can come from something outside the run (an unreadable
//! constants file) that has been fixed since, and a failing run is cheap.
//!
//! Output flags do not change run ids: adding `--tokens` on a re-run reruns
//! only the runs without a tokens part, and leaving it off keeps the parts.

use serde::{Deserialize, Serialize};

use super::output_dir::{Layout, Table};
use super::tables::DeploymentRow;

/// This build, as `status.json` and `manifest.json` name it.
pub(crate) const TOOL: &str = concat!("blis-sweep ", env!("CARGO_PKG_VERSION"));

/// The optional per-run outputs of a sweep.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Outputs {
    /// `tokens/part-<run_id>.parquet`.
    pub(crate) tokens: bool,
    /// `runs/<run_id>/results.jsonl`.
    pub(crate) results_jsonl: bool,
    /// `runs/<run_id>/steps.jsonl`.
    pub(crate) step_trace: bool,
}

impl Outputs {
    /// Their names in `status.json`, in a fixed order.
    pub(crate) fn names(self) -> Vec<String> {
        [(self.tokens, "tokens"), (self.results_jsonl, "results.jsonl"), (self.step_trace, "steps.jsonl")]
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, n)| n.to_owned())
            .collect()
    }
}

/// `status.json`: the outcome of one run, as the `runs` table holds it, and
/// what decides whether it can be reused.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunStatus {
    pub(crate) status: String,
    pub(crate) error: Option<String>,
    /// The tool that made the run; absent in runs made before it was recorded
    /// (which are therefore never reused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tool: Option<String>,
    /// The optional outputs it wrote ([`Outputs::names`]).
    #[serde(default)]
    pub(crate) outputs: Vec<String>,
    /// The deployment it simulated, as the tables' columns (what the spec
    /// says, for a run whose scenario did not resolve).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) deployment: Option<DeploymentRow>,
}

impl RunStatus {
    pub(crate) fn ok(outputs: Outputs, deployment: DeploymentRow) -> RunStatus {
        RunStatus {
            status: "ok".to_owned(),
            error: None,
            tool: Some(TOOL.to_owned()),
            outputs: outputs.names(),
            deployment: Some(deployment),
        }
    }

    pub(crate) fn failed(error: String, deployment: DeploymentRow) -> RunStatus {
        RunStatus {
            status: "failed".to_owned(),
            error: Some(error),
            tool: Some(TOOL.to_owned()),
            outputs: Vec::new(),
            deployment: Some(deployment),
        }
    }

    /// What the summary says of a run that has no (readable) status.
    pub(crate) fn missing() -> RunStatus {
        RunStatus {
            status: "missing".to_owned(),
            error: Some("the run did not finish".to_owned()),
            tool: None,
            outputs: Vec::new(),
            deployment: None,
        }
    }

    /// The run's `status.json`, if it exists and parses.
    pub(crate) fn read(layout: &Layout, run_id: &str) -> Option<RunStatus> {
        let text = std::fs::read_to_string(layout.status(run_id)).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// Whether run `run_id`, finished earlier, can stand for a run asked for now
/// with `wanted` outputs (the rules are in the module docs).
pub(crate) fn reusable(layout: &Layout, run_id: &str, wanted: Outputs) -> bool {
    let Some(status) = RunStatus::read(layout, run_id) else { return false };
    if status.status != "ok" || status.tool.as_deref() != Some(TOOL) {
        return false;
    }
    let dir = layout.run_dir(run_id);
    let mut files =
        vec![layout.part(Table::Requests, run_id), layout.part(Table::Nodes, run_id), dir.join("metrics.json")];
    for name in wanted.names() {
        if !status.outputs.contains(&name) {
            return false;
        }
        files.push(if name == "tokens" { layout.part(Table::Tokens, run_id) } else { dir.join(&name) });
    }
    // The metrics must also read back (the runs table and the report are
    // built from them): a truncated or edited file makes the run be redone.
    files.iter().all(|f| f.is_file())
        && std::fs::read_to_string(dir.join("metrics.json"))
            .is_ok_and(|t| serde_json::from_str::<crate::metrics::Metrics>(&t).is_ok())
}
