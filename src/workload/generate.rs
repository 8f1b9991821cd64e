//! Synthetic workloads: request DAGs drawn from distributions, streamed (the
//! generator is an iterator; nothing is held but the shared prefixes).
//!
//! A spec names an arrival process (`poisson`, `gamma` with a coefficient of
//! variation for burstiness, `constant`) at `rate` requests per second, and
//! prompt / output length distributions (`constant`, `uniform`, `normal`,
//! `lognormal`, `exponential`, `empirical` from a file; each with optional
//! `min`/`max` clamps). On top: shared-prefix groups (token ids, so the prefix
//! cache sees them), multi-turn sessions (a chain of llm calls, each prompt
//! extending the previous prompt and answer, with think time between), or
//! agentic requests (llm steps that fan out to tool calls and fan back in).
//! Presets carry BLIS's numbers (`../shared/reference/blis-spec.md` §9.8).
//!
//! Randomness: one xoshiro256++ stream per purpose, seeded from the run's seed
//! and the purpose's name, so adding a feature never shifts another stream.

use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Exp, Gamma, LogNormal, Normal};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Deserialize;

use super::types::{LlmCall, NodeKind, Request, RequestId, SubRequest};

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

/// Token ids one generated request may hold, over all its calls: 4 Mi, so
/// its JSONL line (≤ 6 bytes an id) stays under the reader's 32 MiB limit.
const MAX_REQUEST_TOKENS: usize = 1 << 22;
/// Nodes one generated request may have (≈ 90 bytes each in JSONL).
const MAX_REQUEST_NODES: usize = 1 << 18;
/// Token ids held for every shared prefix together (64 MiB of ids).
const MAX_PREFIX_TOKENS: u64 = 1 << 24;

/// A spec that cannot generate. Fatal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct GenerateError {
    /// The key at fault, e.g. `input.std`.
    pub field: String,
    /// Why.
    pub reason: String,
}

fn bad<T>(field: &str, reason: impl Into<String>) -> Result<T, GenerateError> {
    Err(GenerateError { field: field.to_owned(), reason: reason.into() })
}

/// A resolved distribution.
#[derive(Debug, Clone)]
enum Dist {
    Constant(f64),
    Uniform(f64, f64),
    Normal(Normal<f64>),
    LogNormal(LogNormal<f64>),
    Exponential(Exp<f64>),
    Empirical(Vec<f64>),
}

#[derive(Debug, Clone)]
struct Clamped {
    dist: Dist,
    min: f64,
    max: f64,
}

impl Clamped {
    fn resolve(field: &str, s: &DistSpec, base: &std::path::Path) -> Result<Clamped, GenerateError> {
        let need = |name: &str, v: Option<f64>| match v {
            Some(x) if x.is_finite() => Ok(x),
            Some(x) => bad(&format!("{field}.{name}"), format!("{x} is not a finite number")),
            None => bad(&format!("{field}.{name}"), format!("missing (needed by kind {})", s.kind)),
        };
        let dist = match s.kind.as_str() {
            "constant" => Dist::Constant(need("value", s.value)?),
            "uniform" => {
                let (lo, hi) = (need("min", s.min)?, need("max", s.max)?);
                if lo > hi {
                    return bad(&format!("{field}.min"), format!("{lo} exceeds max {hi}"));
                }
                Dist::Uniform(lo, hi)
            }
            "normal" => Dist::Normal(
                Normal::new(need("mean", s.mean)?, need("std", s.std)?)
                    .map_err(|e| GenerateError { field: format!("{field}.std"), reason: e.to_string() })?,
            ),
            "lognormal" => {
                let median = need("median", s.median)?;
                if median <= 0.0 {
                    return bad(&format!("{field}.median"), "must be positive");
                }
                Dist::LogNormal(
                    LogNormal::new(median.ln(), need("sigma", s.sigma)?)
                        .map_err(|e| GenerateError { field: format!("{field}.sigma"), reason: e.to_string() })?,
                )
            }
            "exponential" => {
                let mean = need("mean", s.mean)?;
                if mean <= 0.0 {
                    return bad(&format!("{field}.mean"), "must be positive");
                }
                Dist::Exponential(
                    Exp::new(1.0 / mean)
                        .map_err(|e| GenerateError { field: format!("{field}.mean"), reason: e.to_string() })?,
                )
            }
            "empirical" => {
                let Some(path) = &s.path else {
                    return bad(&format!("{field}.path"), "missing (needed by kind empirical)");
                };
                let full = base.join(path);
                let text = std::fs::read_to_string(&full).map_err(|e| GenerateError {
                    field: format!("{field}.path"),
                    reason: format!("{}: {e}", full.display()),
                })?;
                let mut values = Vec::new();
                for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                    match line.trim().parse::<f64>() {
                        Ok(v) if v.is_finite() => values.push(v),
                        _ => {
                            return bad(
                                &format!("{field}.path"),
                                format!("{}:{}: `{}` is not a number", full.display(), i + 1, line.trim()),
                            );
                        }
                    }
                }
                if values.is_empty() {
                    return bad(&format!("{field}.path"), format!("{}: no values", full.display()));
                }
                Dist::Empirical(values)
            }
            other => {
                return bad(
                    &format!("{field}.kind"),
                    format!(
                        "unknown kind `{other}`; use constant, uniform, normal, lognormal, exponential or empirical"
                    ),
                );
            }
        };
        for (name, v) in [("min", s.min), ("max", s.max)] {
            if let Some(x) = v
                && x.is_nan()
            {
                return bad(&format!("{field}.{name}"), "is not a number");
            }
        }
        let (min, max) = (s.min.unwrap_or(f64::NEG_INFINITY), s.max.unwrap_or(f64::INFINITY));
        if min > max {
            return bad(&format!("{field}.min"), format!("{min} exceeds max {max}"));
        }
        Ok(Clamped { dist, min, max })
    }

    fn sample(&self, rng: &mut Xoshiro256PlusPlus) -> f64 {
        let x = match &self.dist {
            Dist::Constant(v) => *v,
            Dist::Uniform(lo, hi) => lo + (hi - lo) * rng.random::<f64>(),
            Dist::Normal(d) => d.sample(rng),
            Dist::LogNormal(d) => d.sample(rng),
            Dist::Exponential(d) => d.sample(rng),
            Dist::Empirical(v) => v[rng.random_range(0..v.len())],
        };
        x.clamp(self.min, self.max)
    }

    /// A count: rounded, at least `floor`, at most `limit`, or an error
    /// naming `field` (checked before anything that size is allocated).
    fn count(&self, rng: &mut Xoshiro256PlusPlus, floor: u32, limit: u32, field: &str) -> Result<u32, GenerateError> {
        let x = self.sample(rng).round().max(f64::from(floor));
        if x > f64::from(limit) {
            return bad(field, format!("drew {x}, more than {limit}; set a lower `max`"));
        }
        Ok(x as u32)
    }

    /// Seconds, never negative, within the simulator's clock.
    fn seconds(&self, rng: &mut Xoshiro256PlusPlus, field: &str) -> Result<f64, GenerateError> {
        let x = (self.sample(rng).max(0.0) * 1e6).round() / 1e6;
        super::types::checked_seconds_to_us(x)
            .or_else(|reason| bad(field, format!("drew {reason}; set a lower `max`")))?;
        Ok(x)
    }
}

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
fn preset(name: &str) -> Option<(DistSpec, DistSpec)> {
    Some(match name {
        "chatbot" => (normal(256.0, 100.0, 2.0, 800.0), normal(256.0, 100.0, 1.0, 1024.0)),
        "summarization" => (normal(4096.0, 500.0, 100.0, 8192.0), normal(512.0, 150.0, 10.0, 2048.0)),
        "contentgen" => (normal(1024.0, 150.0, 10.0, 2048.0), normal(1024.0, 200.0, 10.0, 2048.0)),
        "multidoc" => (normal(10240.0, 1200.0, 500.0, 20480.0), normal(1536.0, 300.0, 50.0, 4096.0)),
        _ => return None,
    })
}

#[derive(Debug, Clone)]
enum Shape {
    Single,
    Sessions { turns: Clamped, think: Option<Clamped> },
    Agentic { steps: Clamped, tools: Clamped, duration: Clamped, result_tokens: Clamped },
}

/// A validated spec, ready to generate for any seed.
#[derive(Debug, Clone)]
pub struct Generator {
    num_requests: u64,
    rate: f64,
    arrival: ArrivalSpec,
    input: Clamped,
    output: Clamped,
    prefix: Option<PrefixSpec>,
    shape: Shape,
    vocab: u32,
}

impl Generator {
    /// Validates `spec`; `base` is where `empirical` paths start.
    pub fn new(spec: &GenerateSpec, base: &std::path::Path) -> Result<Generator, GenerateError> {
        let (preset_input, preset_output) = match &spec.preset {
            None => (None, None),
            Some(p) => match preset(p) {
                Some((i, o)) => (Some(i), Some(o)),
                None => {
                    return bad(
                        "preset",
                        format!("unknown preset `{p}`; use chatbot, summarization, contentgen or multidoc"),
                    );
                }
            },
        };
        let Some(input) = spec.input.clone().or(preset_input) else {
            return bad("input", "missing: give input (or a preset)");
        };
        let Some(output) = spec.output.clone().or(preset_output) else {
            return bad("output", "missing: give output (or a preset)");
        };
        if !(spec.rate.is_finite() && spec.rate > 0.0) {
            return bad("rate", format!("{} must be a positive number of requests per second", spec.rate));
        }
        let arrival = spec.arrival.clone().unwrap_or(ArrivalSpec::Poisson);
        if let ArrivalSpec::Gamma { cv } = arrival
            && !(cv.is_finite() && cv > 0.0)
        {
            return bad("arrival.cv", format!("{cv} must be positive"));
        }
        if let Some(p) = &spec.prefix {
            if p.groups == 0 {
                return bad("prefix.groups", "must be at least 1");
            }
            if u64::from(p.groups) * u64::from(p.tokens) > MAX_PREFIX_TOKENS {
                return bad(
                    "prefix.tokens",
                    format!("{} groups of {} tokens exceed {MAX_PREFIX_TOKENS} token ids in all", p.groups, p.tokens),
                );
            }
            if p.tokens as usize > MAX_REQUEST_TOKENS {
                return bad("prefix.tokens", format!("{} exceeds {MAX_REQUEST_TOKENS} tokens a request", p.tokens));
            }
        }
        let shape = match (&spec.sessions, &spec.agentic) {
            (Some(_), Some(_)) => return bad("agentic", "give sessions or agentic, not both"),
            (None, None) => Shape::Single,
            (Some(s), None) => Shape::Sessions {
                turns: Clamped::resolve("sessions.turns", &s.turns, base)?,
                think: s.think_time.as_ref().map(|t| Clamped::resolve("sessions.think_time", t, base)).transpose()?,
            },
            (None, Some(a)) => Shape::Agentic {
                steps: Clamped::resolve("agentic.steps", &a.steps, base)?,
                tools: Clamped::resolve("agentic.tools", &a.tools, base)?,
                duration: Clamped::resolve("agentic.tool_duration", &a.tool_duration, base)?,
                result_tokens: Clamped::resolve("agentic.tool_result_tokens", &a.tool_result_tokens, base)?,
            },
        };
        Ok(Generator {
            num_requests: spec.num_requests,
            rate: spec.rate,
            arrival,
            input: Clamped::resolve("input", &input, base)?,
            output: Clamped::resolve("output", &output, base)?,
            prefix: spec.prefix.clone(),
            shape,
            vocab: spec.vocab_size.unwrap_or(32_000).max(1),
        })
    }

    /// The requests for `seed`, in arrival order.
    pub fn requests(&self, seed: u64) -> Requests<'_> {
        let stream = |name: &str| Xoshiro256PlusPlus::seed_from_u64(seed ^ crate::hash::hash64(name.as_bytes()));
        let mut prefix_rng = stream("prefix");
        let prefixes = self.prefix.as_ref().map_or_else(Vec::new, |p| {
            (0..p.groups).map(|_| (0..p.tokens).map(|_| prefix_rng.random_range(0..self.vocab)).collect()).collect()
        });
        Requests {
            g: self,
            next: 0,
            clock: 0.0,
            arrival: stream("arrival"),
            lengths: stream("lengths"),
            tokens: stream("tokens"),
            groups: stream("prefix-groups"),
            shape: stream("shape"),
            prefixes,
            failed: false,
        }
    }
}

/// The request stream of one seed.
#[derive(Debug)]
pub struct Requests<'a> {
    g: &'a Generator,
    next: u64,
    clock: f64,
    arrival: Xoshiro256PlusPlus,
    lengths: Xoshiro256PlusPlus,
    tokens: Xoshiro256PlusPlus,
    groups: Xoshiro256PlusPlus,
    shape: Xoshiro256PlusPlus,
    prefixes: Vec<Vec<u32>>,
    /// An error ended the stream.
    failed: bool,
}

impl Requests<'_> {
    fn gap(&mut self) -> f64 {
        let mean = 1.0 / self.g.rate;
        match self.g.arrival {
            ArrivalSpec::Constant => mean,
            ArrivalSpec::Poisson => -mean * (1.0 - self.arrival.random::<f64>()).ln(),
            ArrivalSpec::Gamma { cv } => {
                let shape = 1.0 / (cv * cv);
                Gamma::new(shape, mean / shape).map_or(mean, |d| d.sample(&mut self.arrival))
            }
        }
    }

    fn ids(&mut self, n: u32) -> Vec<u32> {
        let vocab = self.g.vocab;
        (0..n).map(|_| self.tokens.random_range(0..vocab)).collect()
    }

    fn llm(input: Vec<u32>, output: Vec<u32>, next: Vec<u32>, interval: f64) -> SubRequest {
        SubRequest {
            next,
            interval,
            kind: NodeKind::Llm(LlmCall::for_prompt(input, output.len() as u32).with_output_ids(output)),
            result: None,
        }
    }
}

impl Iterator for Requests<'_> {
    type Item = Result<Request, GenerateError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.g.num_requests || self.failed {
            return None;
        }
        let item = self.build();
        self.failed = item.is_err();
        Some(item)
    }
}

impl Requests<'_> {
    /// The next request, or why the spec cannot make it (a size or a time
    /// beyond the bounds, found before it is allocated).
    fn build(&mut self) -> Result<Request, GenerateError> {
        let id = self.next;
        self.next += 1;
        if id > 0 {
            self.clock += self.gap();
        }
        let arrival_time = (self.clock * 1e6).round() / 1e6;
        super::types::checked_seconds_to_us(arrival_time)
            .or_else(|reason| bad("rate", format!("request {id} would arrive at {reason}")))?;
        let tokens = MAX_REQUEST_TOKENS as u32;
        let mut context: Vec<u32> = if self.prefixes.is_empty() {
            Vec::new()
        } else {
            let k = self.groups.random_range(0..self.prefixes.len());
            self.prefixes[k].clone()
        };
        let new_tokens = self.g.input.count(&mut self.lengths, 1, tokens, "input")?;
        let output_len = self.g.output.count(&mut self.lengths, 1, tokens, "output")?;
        // Token ids written so far, and nodes, against the request's bounds.
        let mut budget = Budget { id, ids: 0, nodes: 0 };
        budget.take(context.len() + new_tokens as usize, 0)?;
        context.extend(self.ids(new_tokens));
        let mut subs = Vec::new();
        match &self.g.shape {
            Shape::Single => {
                // One call: output ids could only serve a later call, and
                // without shared prefixes prompt ids cannot hit the cache
                // either, so neither is written.
                let mut sub = Self::llm(context, Vec::new(), vec![], 0.0);
                if let NodeKind::Llm(call) = &mut sub.kind {
                    call.output_tokens = output_len;
                    call.output_token_ids = None;
                    if self.prefixes.is_empty() {
                        call.input_token_ids = None;
                    }
                }
                subs.push(sub);
            }
            Shape::Sessions { turns, think } => {
                let turns = turns.count(&mut self.shape, 1, MAX_REQUEST_NODES as u32, "sessions.turns")?;
                budget.take(output_len as usize, 0)?;
                let mut output = self.ids(output_len);
                for t in 0..turns {
                    let interval = match (t, think) {
                        (0, _) | (_, None) => 0.0,
                        (_, Some(d)) => d.seconds(&mut self.shape, "sessions.think_time")?,
                    };
                    let next = if t + 1 < turns { vec![t + 1] } else { vec![] };
                    if t > 0 {
                        let more = self.g.input.count(&mut self.lengths, 1, tokens, "input")?;
                        let n = self.g.output.count(&mut self.lengths, 1, tokens, "output")?;
                        // This turn repeats the context, adds the user's and the answer's tokens.
                        budget.take(context.len() + more as usize + n as usize, 1)?;
                        let user = self.ids(more);
                        context.extend(user);
                        output = self.ids(n);
                    }
                    subs.push(Self::llm(context.clone(), output.clone(), next, interval));
                    context.extend_from_slice(&output);
                }
            }
            Shape::Agentic { steps, tools, duration, result_tokens } => {
                let nodes = MAX_REQUEST_NODES as u32;
                let steps = steps.count(&mut self.shape, 1, nodes, "agentic.steps")?;
                budget.take(output_len as usize, 0)?;
                let mut output = self.ids(output_len);
                for s in 0..steps {
                    if s > 0 {
                        let n = self.g.output.count(&mut self.lengths, 1, tokens, "output")?;
                        budget.take(context.len() + n as usize, 1)?;
                        output = self.ids(n);
                    }
                    let llm_index = subs.len() as u32;
                    let last = s + 1 == steps;
                    let n_tools = if last { 0 } else { tools.count(&mut self.shape, 0, nodes, "agentic.tools")? };
                    budget.take(0, n_tools as usize)?;
                    let next_llm = llm_index + 1 + n_tools;
                    let next = if last {
                        vec![]
                    } else if n_tools == 0 {
                        vec![next_llm]
                    } else {
                        (llm_index + 1..next_llm).collect()
                    };
                    subs.push(Self::llm(context.clone(), output.clone(), next, 0.0));
                    context.extend_from_slice(&output);
                    for _ in 0..n_tools {
                        let d = duration.seconds(&mut self.shape, "agentic.tool_duration")?;
                        subs.push(SubRequest {
                            next: vec![next_llm],
                            interval: 0.0,
                            kind: NodeKind::ToolCall { duration: d },
                            result: None,
                        });
                        let n = result_tokens.count(&mut self.shape, 0, tokens, "agentic.tool_result_tokens")?;
                        budget.take(n as usize, 0)?;
                        let result = self.ids(n);
                        context.extend(result);
                    }
                }
            }
        }
        Ok(Request { request_id: RequestId::Int(id), arrival_time, initial: vec![0], sub_requests: subs })
    }
}

/// What one generated request has used of its bounds.
struct Budget {
    id: u64,
    ids: usize,
    nodes: usize,
}

impl Budget {
    fn take(&mut self, ids: usize, nodes: usize) -> Result<(), GenerateError> {
        self.ids = self.ids.saturating_add(ids);
        self.nodes = self.nodes.saturating_add(nodes);
        if self.ids > MAX_REQUEST_TOKENS {
            return bad(
                "input",
                format!(
                    "request {} would hold more than {MAX_REQUEST_TOKENS} token ids over its calls; lower the lengths, turns or steps",
                    self.id
                ),
            );
        }
        if self.nodes > MAX_REQUEST_NODES {
            return bad(
                "agentic.tools",
                format!("request {} would have more than {MAX_REQUEST_NODES} sub-requests", self.id),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn spec(yaml: &str) -> GenerateSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn presets_and_clamps_hold() {
        let g = Generator::new(&spec("preset: chatbot\nnum_requests: 500\nrate: 10\n"), Path::new(".")).unwrap();
        let requests: Vec<Request> = g.requests(7).map(Result::unwrap).collect();
        assert_eq!(requests.len(), 500);
        let mut previous = 0.0;
        for r in &requests {
            assert!(r.arrival_time >= previous);
            previous = r.arrival_time;
            let NodeKind::Llm(c) = &r.sub_requests[0].kind else { panic!() };
            assert!((2..=800).contains(&c.input_tokens) && (1..=1024).contains(&c.output_tokens));
        }
        // Poisson at 10/s: 500 arrivals take about 50 s.
        assert!((40.0..60.0).contains(&previous), "{previous}");
        // Same seed, same requests; another seed, others.
        assert_eq!(g.requests(7).map(Result::unwrap).collect::<Vec<_>>(), requests);
        assert_ne!(g.requests(8).next().map(Result::unwrap), requests.first().cloned());
    }

    #[test]
    fn sessions_and_agents_build_valid_dags_with_growing_context() {
        let yaml = "num_requests: 20\nrate: 1\ninput: {kind: constant, value: 10}\noutput: {kind: uniform, min: 1, max: 5}\n\
                    prefix: {groups: 2, tokens: 32}\n";
        for shape in [
            "sessions: {turns: {kind: constant, value: 3}, think_time: {kind: exponential, mean: 2}}",
            "agentic: {steps: {kind: uniform, min: 1, max: 4}, tools: {kind: constant, value: 2}, \
             tool_duration: {kind: lognormal, median: 0.5, sigma: 1}, tool_result_tokens: {kind: constant, value: 7}}",
        ] {
            let g = Generator::new(&spec(&format!("{yaml}{shape}\n")), Path::new(".")).unwrap();
            let mut text = Vec::new();
            for r in g.requests(1) {
                crate::workload::writer::write_workload_row(&mut text, &r.unwrap());
            }
            // The reader accepts every row: valid DAGs, roots, token counts.
            let back: Vec<Request> =
                crate::workload::reader::Reader::new(&text[..], "gen", crate::workload::reader::Format::Workload)
                    .map(|r| r.unwrap())
                    .collect();
            assert_eq!(back.len(), 20);
            for r in &back {
                let prompts: Vec<&Vec<u32>> = r
                    .sub_requests
                    .iter()
                    .filter_map(|s| match &s.kind {
                        NodeKind::Llm(c) => c.input_token_ids.as_ref(),
                        NodeKind::ToolCall { .. } => None,
                    })
                    .collect();
                // Each prompt extends the one before: the prefix cache can hit.
                for w in prompts.windows(2) {
                    assert!(w[1].starts_with(w[0]) && w[1].len() > w[0].len());
                }
            }
        }
    }

    #[test]
    fn bad_specs_name_their_field() {
        let cases = [
            ("num_requests: 1\nrate: 0\npreset: chatbot\n", "rate"),
            ("num_requests: 1\nrate: 1\npreset: chat\n", "preset"),
            (
                "num_requests: 1\nrate: 1\ninput: {kind: normal, mean: 5}\noutput: {kind: constant, value: 1}\n",
                "input.std",
            ),
            ("num_requests: 1\nrate: 1\ninput: {kind: zipf}\noutput: {kind: constant, value: 1}\n", "input.kind"),
            ("num_requests: 1\nrate: 1\npreset: chatbot\narrival: {kind: gamma, cv: -1}\n", "arrival.cv"),
            // Defect 9.7: a NaN clamp made f64::clamp panic.
            (
                "num_requests: 1\nrate: 1\ninput: {kind: constant, value: 5, min: .nan}\noutput: {kind: constant, value: 1}\n",
                "input.min",
            ),
            ("num_requests: 1\nrate: 1\npreset: chatbot\nprefix: {groups: 100000, tokens: 100000}\n", "prefix.tokens"),
        ];
        for (yaml, field) in cases {
            let e = Generator::new(&spec(yaml), Path::new(".")).unwrap_err();
            assert_eq!(e.field, field, "{yaml}: {e}");
        }
    }

    #[test]
    fn sizes_and_times_beyond_the_bounds_end_the_stream_with_an_error() {
        // Defect 9.7: huge session turns, tool counts or token counts were
        // allocated (and aborted); defect 9.5: a tiny rate overflowed the clock.
        let base = "num_requests: 3\nrate: 1\noutput: {kind: constant, value: 1}\n";
        let cases = [
            ("input: {kind: constant, value: 1e12}\n", "input"),
            ("input: {kind: constant, value: 1000}\nsessions: {turns: {kind: constant, value: 100000}}\n", "input"),
            (
                "input: {kind: constant, value: 1}\nagentic: {steps: {kind: constant, value: 2}, tools: {kind: constant, value: 4e9}, \
                 tool_duration: {kind: constant, value: 1}, tool_result_tokens: {kind: constant, value: 0}}\n",
                "agentic.tools",
            ),
            (
                "input: {kind: constant, value: 1}\nagentic: {steps: {kind: constant, value: 2}, tools: {kind: constant, value: 1}, \
                 tool_duration: {kind: constant, value: 2e13}, tool_result_tokens: {kind: constant, value: 0}}\n",
                "agentic.tool_duration",
            ),
        ];
        for (extra, field) in cases {
            let g = Generator::new(&spec(&format!("{base}{extra}")), Path::new(".")).unwrap();
            let items: Vec<_> = g.requests(1).collect();
            assert_eq!(items.len(), 1, "{extra}: the first error ends the stream");
            assert_eq!(items[0].as_ref().unwrap_err().field, field, "{extra}");
        }
        let g = Generator::new(
            &spec("num_requests: 2\nrate: 5e-324\npreset: chatbot\narrival: {kind: constant}\n"),
            Path::new("."),
        )
        .unwrap();
        let items: Vec<_> = g.requests(1).collect();
        assert!(items[0].is_ok());
        assert_eq!(items[1].as_ref().unwrap_err().field, "rate");
    }

    #[test]
    fn gamma_arrivals_are_burstier_than_poisson() {
        let gaps = |arrival: &str| {
            let g = Generator::new(
                &spec(&format!("preset: chatbot\nnum_requests: 4000\nrate: 10\narrival: {arrival}\n")),
                Path::new("."),
            )
            .unwrap();
            let t: Vec<f64> = g.requests(3).map(|r| r.unwrap().arrival_time).collect();
            let d: Vec<f64> = t.windows(2).map(|w| w[1] - w[0]).collect();
            let mean = d.iter().sum::<f64>() / d.len() as f64;
            let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / d.len() as f64;
            (mean, var.sqrt() / mean)
        };
        let (m1, cv1) = gaps("{kind: poisson}");
        let (m3, cv3) = gaps("{kind: gamma, cv: 3}");
        let (_, cv0) = gaps("{kind: constant}");
        assert!((m1 - 0.1).abs() < 0.01 && (m3 - 0.1).abs() < 0.02, "{m1} {m3}");
        assert!((cv1 - 1.0).abs() < 0.1 && cv3 > 2.0 && cv0 < 1e-6, "{cv1} {cv3} {cv0}");
    }
}
