//! The one list of measured-run sources: folders of real vLLM runs with
//! their measurements, which `blis-sweep convert` brings into the
//! simulator's formats (a workload JSONL of what was sent, a baseline result
//! JSONL of what the real server measured, a scenario of how it was served)
//! and which fit and the calibration matrix replay. Each source is one file
//! of this folder; [`Source`] names them, [`list`] and [`convert`] dispatch.

use std::path::Path;

use super::blis_vllm_h100::blis_vllm_h100;
use super::common::{ConvertError, Converted};
use super::llmservingsim::llmservingsim;
use super::{blis_eval, blis_trainval, ispass26, silicon};

/// A folder of real runs that [`convert`] understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// `../shared/data/blis-vllm-h100`: see [`blis_vllm_h100`].
    BlisVllmH100,
    /// `../shared/data/llmservingsim-vllm-bench`: see [`llmservingsim`].
    Llmservingsim,
    /// BLIS's training experiments in `../shared/data/blis-vllm-h100` known
    /// only by their aggregates: see [`super::blis_trainval`] (calibration
    /// plans only; nothing to convert).
    BlisTrainval,
    /// BLIS's held-out evaluation runs in `../shared/data/blis-vllm-h100`
    /// known only by their aggregates, replayed with the workload their
    /// profile names (assumed): see [`super::blis_eval`] (calibration plans
    /// only).
    BlisEval,
    /// aiconfigurator's measured deployments (`silicon_sample.csv`): see
    /// [`super::silicon`] (calibration plans only).
    Silicon,
    /// LLMServingSim 2.0's ISPASS'26 runs (`../shared/data/llmservingsim-ispass26`):
    /// see [`super::ispass26`] (calibration plans only).
    #[serde(rename = "llmservingsim-ispass26")]
    Ispass26,
}

impl Source {
    /// The name plans and the command line use.
    pub fn name(self) -> &'static str {
        match self {
            Source::BlisVllmH100 => "blis-vllm-h100",
            Source::Llmservingsim => "llmservingsim",
            Source::BlisTrainval => "blis-trainval",
            Source::BlisEval => "blis-eval",
            Source::Silicon => "silicon",
            Source::Ispass26 => "llmservingsim-ispass26",
        }
    }
}

/// The runs in `data`, sorted: the request files of a blis-vllm-h100
/// folder, the run folders of an llmservingsim one.
pub fn list(source: Source, data: &Path) -> Result<Vec<String>, ConvertError> {
    let (dir, suffix) = match source {
        Source::BlisVllmH100 => (data.join("requests"), ".csv"),
        Source::Llmservingsim => (data.join("runs"), ""),
        Source::BlisTrainval => return blis_trainval::list(data),
        Source::BlisEval => return blis_eval::list(data),
        Source::Silicon => return silicon::list(data),
        Source::Ispass26 => return ispass26::list(data),
    };
    let entries = std::fs::read_dir(&dir).map_err(|e| ConvertError {
        file: dir.display().to_string(),
        line: 0,
        field: "folder".to_owned(),
        reason: e.to_string(),
    })?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter_map(|n| if suffix.is_empty() { Some(n) } else { n.strip_suffix(suffix).map(str::to_owned) })
        .collect();
    names.sort();
    Ok(names)
}

/// Converts run `name` of `data`.
pub fn convert(source: Source, data: &Path, name: &str) -> Result<Converted, ConvertError> {
    match source {
        Source::BlisVllmH100 => blis_vllm_h100(data, name),
        Source::Llmservingsim => llmservingsim(data, name),
        Source::BlisTrainval | Source::BlisEval | Source::Silicon | Source::Ispass26 => Err(ConvertError {
            file: data.display().to_string(),
            line: 0,
            field: "source".to_owned(),
            reason: format!(
                "{name}: a {} run has no per-request data to convert; replay it in a calibration plan",
                source.name()
            ),
        }),
    }
}
