//! A generated workload as a plan or a spec file writes it (plain serde
//! structs, unknown keys rejected), the error a spec that cannot generate
//! gives, and BLIS's presets (`../shared/reference/blis-spec.md` §9.8).

use serde::Deserialize;

/// A generated workload, as written in a plan or a spec file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GenerateSpec {
    /// `chatbot`, `summarization`, `contentgen` or `multidoc`: BLIS's prompt
    /// and output lengths, unless `input`/`output` are given.
    pub preset: Option<String>,
    /// Requests (sessions, agent runs) to generate.
    pub num_requests: u64,
    /// Mean arrivals per second.
    pub rate: f64,
    /// Arrival process; default poisson.
    pub arrival: Option<ArrivalSpec>,
    /// Prompt length (tokens; a session's or agent's new tokens per turn).
    pub input: Option<DistSpec>,
    /// Output length (tokens).
    pub output: Option<DistSpec>,
    /// Shared prefixes: `groups` prompts of `tokens` tokens; each request
    /// starts with one of them, chosen uniformly.
    pub prefix: Option<PrefixSpec>,
    /// Multi-turn sessions.
    pub sessions: Option<SessionSpec>,
    /// Agentic requests.
    pub agentic: Option<AgenticSpec>,
    /// Token ids are drawn from `0..vocab_size` (default 32000).
    pub vocab_size: Option<u32>,
}

/// Arrival process.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum ArrivalSpec {
    /// Exponential gaps.
    Poisson,
    /// Gamma-distributed gaps with coefficient of variation `cv` (1 = Poisson;
    /// larger is burstier).
    Gamma {
        /// Coefficient of variation of the gaps.
        cv: f64,
    },
    /// Equal gaps.
    Constant,
}

/// A distribution of a number: `kind` and its parameters, plus clamps.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct DistSpec {
    /// constant | uniform | normal | lognormal | exponential | empirical
    pub kind: String,
    /// constant: the value.
    pub value: Option<f64>,
    /// normal, exponential: the mean.
    pub mean: Option<f64>,
    /// normal: the standard deviation.
    pub std: Option<f64>,
    /// lognormal: the median (e^mu).
    pub median: Option<f64>,
    /// lognormal: sigma of the underlying normal.
    pub sigma: Option<f64>,
    /// uniform: bounds; all kinds: clamps.
    pub min: Option<f64>,
    /// uniform: bounds; all kinds: clamps.
    pub max: Option<f64>,
    /// empirical: a file with one number per line, sampled uniformly.
    pub path: Option<String>,
}

/// Shared prefixes.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PrefixSpec {
    /// Distinct prefixes.
    pub groups: u32,
    /// Tokens in each.
    pub tokens: u32,
}

/// Multi-turn sessions: one request is a chain of `turns` llm calls.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SessionSpec {
    /// Turns per session (rounded, at least 1).
    pub turns: DistSpec,
    /// Seconds between an answer and the next turn.
    pub think_time: Option<DistSpec>,
}

/// Agentic requests: `steps` llm calls; after each but the last, `tools`
/// tool calls in parallel, whose results (`tool_result_tokens` each) join the
/// next step's prompt.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AgenticSpec {
    /// LLM steps (rounded, at least 1).
    pub steps: DistSpec,
    /// Tool calls after a step (rounded, at least 0).
    pub tools: DistSpec,
    /// Seconds a tool call takes.
    pub tool_duration: DistSpec,
    /// Tokens a tool result adds to the next prompt.
    pub tool_result_tokens: DistSpec,
}

/// A spec that cannot generate. Fatal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct GenerateError {
    /// The key at fault, e.g. `input.std`.
    pub field: String,
    /// Why.
    pub reason: String,
}

/// `Err` of a [`GenerateError`] at `field`.
pub(super) fn bad<T>(field: &str, reason: impl Into<String>) -> Result<T, GenerateError> {
    Err(GenerateError { field: field.to_owned(), reason: reason.into() })
}

/// A clamped normal distribution.
fn normal(mean: f64, std: f64, min: f64, max: f64) -> DistSpec {
    DistSpec {
        kind: "normal".into(),
        mean: Some(mean),
        std: Some(std),
        min: Some(min),
        max: Some(max),
        ..DistSpec::default()
    }
}

/// BLIS's presets (`defaults.yaml`, via blis-spec §9.8): prompt and output
/// mean / std / min / max, gaussian.
pub(super) fn preset(name: &str) -> Option<(DistSpec, DistSpec)> {
    Some(match name {
        "chatbot" => (normal(256.0, 100.0, 2.0, 800.0), normal(256.0, 100.0, 1.0, 1024.0)),
        "summarization" => (normal(4096.0, 500.0, 100.0, 8192.0), normal(512.0, 150.0, 10.0, 2048.0)),
        "contentgen" => (normal(1024.0, 150.0, 10.0, 2048.0), normal(1024.0, 200.0, 10.0, 2048.0)),
        "multidoc" => (normal(10240.0, 1200.0, 500.0, 20480.0), normal(1536.0, 300.0, 50.0, 4096.0)),
        _ => return None,
    })
}
