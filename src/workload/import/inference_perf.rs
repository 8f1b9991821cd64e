//! `inference-perf`: a config YAML of kubernetes-sigs/inference-perf whose
//! data is its `shared_prefix` generator, replayed as the requests that run
//! would send; and that generator itself, which the `blis-trainval` and
//! `blis-eval` runs also replay (one implementation for all three).
//!
//! Read (inference-perf `config/config.py`, `config/loadgen/config.py`,
//! `config/datagen/config.py`): `load: {type: constant|poisson, interval,
//! stages: [{rate, duration}]}` and `data: {type: shared_prefix,
//! shared_prefix: {num_groups (alias num_unique_system_prompts, default 10),
//! num_prompts_per_group (alias num_users_per_system_prompt, 10),
//! system_prompt_len (100), question_len (50), output_len (50),
//! enable_multi_turn_chat (false)}}`. The other top-level sections (`api`,
//! `server`, `metrics`, `report`, `storage`, `tokenizer`,
//! `circuit_breakers`) and the client-side load keys (workers, timeouts,
//! retries) say nothing about what is sent and are accepted unread; a key
//! inference-perf does not know is an error naming its line. What the
//! replay cannot build is refused by name: other data types, other load
//! types, `sweep` (it probes the server), length distributions, multimodal.
//!
//! Mapping (inference-perf `datagen/shared_prefix_datagen.py`,
//! `loadgen/load_timer.py`):
//! - `num_groups` system prompts of `system_prompt_len` tokens, each with
//!   `num_prompts_per_group` questions of `question_len` tokens: a pool of
//!   P·U prompts; request `k` sends prompt `k mod P·U` (its group's system
//!   prompt, then its question) and asks for `output_len` tokens.
//! - Multi-turn: the P·U prompts are users; request `k` is round `k div P·U`
//!   of user `k mod P·U`, whose prompt is the whole conversation so far (its
//!   group's system prompt, every earlier question and answer) and the new
//!   question. A user is one request DAG of its rounds in order; round `r`
//!   waits for round `r − 1`'s reply and then the gap between their scheduled
//!   sends (inference-perf sends a round at its scheduled time or when the
//!   previous reply arrives, whichever is later; a DAG holds no such max, so
//!   this is the later bound under load, BLIS's `P·U / rate` think time).
//! - Stages run in order, `load.interval` seconds apart (inference-perf's
//!   default 1 s). `constant`: `rate × duration` requests, exponential gaps
//!   rescaled to fill the stage (inference-perf's `ConstantLoadTimer`);
//!   `poisson`: each second of the stage a Poisson(`rate`) count of
//!   requests, spread the same way over that second (`PoissonLoadTimer`).
//! - Prompts are token ids, not text: the server's re-tokenisation of
//!   decoded random ids (which the BLIS runs measured at +27 to +36 tokens)
//!   is not added. Arrivals are seeded by the run's `--seed`.

use std::path::Path;

use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Poisson};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Deserialize;
use serde::de::IgnoredAny;

use super::common::{ImportError, ImportOptions, Requests, fresh_tokens, llm_request, token_ids};
use crate::workload::types::{LlmCall, NodeKind, Request, RequestId, SubRequest};

/// One load stage.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Stage {
    /// Requests per second.
    pub rate: f64,
    /// Seconds.
    pub duration: f64,
}

/// How a stage spaces its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Load {
    /// `rate × duration` requests, exponential gaps rescaled to the stage.
    Constant,
    /// A Poisson count each second, spread over that second.
    Poisson,
}

/// The `shared_prefix` generator and its load, resolved.
#[derive(Debug, Clone)]
pub(super) struct SharedPrefixRun {
    /// System prompts (P).
    pub(super) groups: u64,
    /// Questions (users, multi-turn) per system prompt (U).
    pub(super) prompts_per_group: u64,
    pub(super) system_prompt_len: u32,
    /// Question tokens as sent (the BLIS replays add the server's count of
    /// tokenizer overhead here).
    pub(super) question_len: u32,
    pub(super) output_len: u32,
    pub(super) multi_turn: bool,
    pub(super) load: Load,
    /// Seconds between stages.
    pub(super) interval_s: f64,
    pub(super) stages: Vec<Stage>,
}

/// The longest prompt part or output a replayed request may have (the
/// reader's bound on a request is 4 Mi tokens).
pub(super) const MAX_LENGTH: u32 = 1 << 20;
/// The most requests, and prompt tokens in all, a replay builds (in memory:
/// 2^30 token ids are 4 GiB).
const MAX_REQUESTS: f64 = (1u64 << 22) as f64;
const MAX_PROMPT_TOKENS: f64 = (1u64 << 30) as f64;
/// The most prompts (P·U): question streams are numbered from 10^6 on, after
/// the system prompts' (the numbering the BLIS replays' goldens fixed).
const MAX_POOL: u64 = 1_000_000;

impl SharedPrefixRun {
    /// Why the run cannot be replayed, as (field, reason).
    pub(super) fn check(&self) -> Result<(), (String, String)> {
        let bad = |f: &str, r: String| Err((f.to_owned(), r));
        for (field, v) in [
            ("system_prompt_len", self.system_prompt_len),
            ("question_len", self.question_len),
            ("output_len", self.output_len),
        ] {
            if v > MAX_LENGTH {
                return bad(field, format!("{v} tokens exceed {MAX_LENGTH} (a replayed request's bound)"));
            }
        }
        if self.output_len == 0 {
            return bad("output_len", "must be at least 1 token".to_owned());
        }
        if self.groups == 0 || self.prompts_per_group == 0 {
            return bad("num_groups", "num_groups and num_prompts_per_group must be at least 1".to_owned());
        }
        let pool = self.groups.saturating_mul(self.prompts_per_group);
        if pool > MAX_POOL {
            return bad("num_groups", format!("{pool} prompts (num_groups x num_prompts_per_group) exceed {MAX_POOL}"));
        }
        if !(self.interval_s.is_finite() && self.interval_s >= 0.0) {
            return bad("interval", format!("{} is not a number of seconds", self.interval_s));
        }
        let (mut total, mut span) = (0.0, 0.0);
        for (k, s) in self.stages.iter().enumerate() {
            if !(s.rate.is_finite() && s.rate > 0.0 && s.duration.is_finite() && s.duration > 0.0) {
                return bad(&format!("stages[{k}]"), "rate and duration must be positive numbers".to_owned());
            }
            // A Poisson count has tails; 1.1 × its mean bounds it for sizing.
            total += s.rate * s.duration * if self.load == Load::Poisson { 1.1 } else { 1.0 };
            span += s.duration + self.interval_s;
        }
        if self.stages.is_empty() {
            return bad("stages", "no load stages".to_owned());
        }
        // A Poisson stage draws a count for every second: as many draws as
        // requests a replay holds.
        if self.load == Load::Poisson && span > MAX_REQUESTS {
            return bad(
                "stages",
                format!("poisson stages of {span} s in all exceed {MAX_REQUESTS} s (one draw a second)"),
            );
        }
        // Arrivals fall within the stages: they must fit the simulator's clock.
        if let Err(reason) = crate::workload::checked_seconds_to_us(span) {
            return bad("stages", format!("in all {reason}"));
        }
        let tokens = if self.multi_turn {
            // Round r of a user carries r earlier questions and answers: the
            // prompts of R rounds sum to R·sys + R(R+1)/2·q + R(R−1)/2·o.
            let rounds = total / pool as f64;
            pool as f64
                * (rounds * f64::from(self.system_prompt_len)
                    + rounds * (rounds + 1.0) / 2.0 * f64::from(self.question_len)
                    + rounds * (rounds - 1.0).max(0.0) / 2.0 * f64::from(self.output_len))
        } else {
            total * (f64::from(self.system_prompt_len) + f64::from(self.question_len))
        };
        if self.multi_turn {
            // A user's last round carries its whole conversation.
            let rounds = (total / pool as f64).ceil();
            let last = f64::from(self.system_prompt_len)
                + rounds * f64::from(self.question_len)
                + (rounds - 1.0).max(0.0) * f64::from(self.output_len);
            if last > f64::from(super::common::MAX_TOKENS) {
                return bad(
                    "stages",
                    format!(
                        "a user's last round would carry {last:.0} prompt tokens (at most {} a call): fewer rounds per \
                         user (more users, a lower rate or a shorter stage)",
                        super::common::MAX_TOKENS
                    ),
                );
            }
        }
        if total > MAX_REQUESTS || tokens > MAX_PROMPT_TOKENS {
            return bad(
                "stages",
                format!(
                    "{total:.0} requests of {tokens:.0} prompt tokens in all exceed what a replay holds ({MAX_REQUESTS} \
                     requests, {MAX_PROMPT_TOKENS} tokens)"
                ),
            );
        }
        Ok(())
    }

    /// Every request's scheduled send, seconds, and each stage's span.
    fn schedule(&self, seed: u64) -> (Vec<f64>, Vec<(f64, f64)>) {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let (mut sends, mut stages) = (Vec::new(), Vec::new());
        let mut start = 0.0;
        for (k, s) in self.stages.iter().enumerate() {
            if k > 0 {
                start += self.interval_s;
            }
            match self.load {
                Load::Constant => {
                    let n = (s.rate * s.duration).round() as usize;
                    spread(&mut rng, n, start, s.duration, &mut sends);
                }
                Load::Poisson => {
                    let count = Poisson::new(s.rate).expect("a checked positive rate");
                    let end = start + s.duration;
                    for second in 0..s.duration.ceil() as u64 {
                        let n = count.sample(&mut rng) as usize;
                        let from = sends.len();
                        spread(&mut rng, n, start + second as f64, 1.0, &mut sends);
                        // The stage ends mid-second: what falls after is not sent.
                        let kept = sends[from..].iter().take_while(|&&t| t < end).count();
                        sends.truncate(from + kept);
                    }
                }
            }
            stages.push((start, start + s.duration));
            start += s.duration;
        }
        (sends, stages)
    }

    /// The requests, in arrival order, and each stage's `[start, end)`.
    pub(super) fn requests(&self, seed: u64) -> (Vec<Request>, Vec<(f64, f64)>) {
        let (sends, stages) = self.schedule(seed);
        ((0..self.count(&sends)).map(|i| self.request(i, &sends)).collect(), stages)
    }

    /// How many requests `sends` make: one per send, or (multi-turn) one
    /// per user who sends.
    fn count(&self, sends: &[f64]) -> u64 {
        let pool = self.groups * self.prompts_per_group;
        if self.multi_turn { pool.min(sends.len() as u64) } else { sends.len() as u64 }
    }

    /// Request `i` of `sends` (built one at a time: memory stays flat).
    fn request(&self, i: u64, sends: &[f64]) -> Request {
        let pool = self.groups * self.prompts_per_group;
        let system = |group: u64| token_ids(group, self.system_prompt_len as usize);
        if !self.multi_turn {
            let prompt = i % pool;
            let ids: Vec<u32> =
                system(prompt % self.groups).chain(token_ids(MAX_POOL + prompt, self.question_len as usize)).collect();
            return llm_request(RequestId::Int(i), sends[i as usize], ids, self.output_len, None);
        }
        // User i's own questions and answers: one stream, drawn in turn.
        let stream = 2 * MAX_POOL + i;
        let mut drawn = 0u64;
        let mut draw = |n: u32| -> Vec<u32> {
            let ids = fresh_tokens(stream, drawn, n as usize).collect();
            drawn += u64::from(n);
            ids
        };
        let mut context: Vec<u32> = system(i % self.groups).collect();
        let rounds: Vec<usize> = (i as usize..sends.len()).step_by(pool as usize).collect();
        let nodes = rounds
            .iter()
            .enumerate()
            .map(|(r, &k)| {
                context.extend(draw(self.question_len));
                let output = draw(self.output_len);
                let call = LlmCall::new(context.len() as u32, self.output_len)
                    .with_input_ids(context.clone())
                    .with_output_ids(output.clone());
                context.extend(output);
                SubRequest {
                    next: if r + 1 < rounds.len() { vec![r as u32 + 1] } else { vec![] },
                    interval: if r == 0 { 0.0 } else { round_us(sends[k] - sends[rounds[r - 1]]) },
                    kind: NodeKind::Llm(call),
                    result: None,
                }
            })
            .collect();
        Request {
            traffic: Default::default(),
            request_id: RequestId::Int(i),
            arrival_time: round_us(sends[i as usize]),
            initial: vec![0],
            sub_requests: nodes,
        }
    }
}

fn round_us(s: f64) -> f64 {
    (s * 1e6).round() / 1e6
}

/// `n` sends over `[start, start + span)`: the first at `start`, exponential
/// gaps scaled so that the n gaps fill the span.
fn spread(rng: &mut Xoshiro256PlusPlus, n: usize, start: f64, span: f64, out: &mut Vec<f64>) {
    let gaps: Vec<f64> = (0..n).map(|_| -(1.0 - rng.random::<f64>()).ln()).collect();
    let total: f64 = gaps.iter().sum();
    let mut t = 0.0;
    for g in gaps {
        out.push(start + t / total * span);
        t += g;
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code, reason = "keys inference-perf knows are accepted and not read")]
struct Config {
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    load: Option<LoadSpec>,
    // Where and how it was sent: nothing of what is sent.
    api: Option<IgnoredAny>,
    server: Option<IgnoredAny>,
    metrics: Option<IgnoredAny>,
    report: Option<IgnoredAny>,
    storage: Option<IgnoredAny>,
    tokenizer: Option<IgnoredAny>,
    circuit_breakers: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code, reason = "keys inference-perf knows are accepted and not read")]
struct Data {
    #[serde(rename = "type", default = "mock")]
    kind: String,
    shared_prefix: Option<SharedPrefixSpec>,
    // Other data types' settings, read by those types only.
    path: Option<IgnoredAny>,
    input_distribution: Option<IgnoredAny>,
    output_distribution: Option<IgnoredAny>,
    multimodal: Option<IgnoredAny>,
    trace: Option<IgnoredAny>,
    otel_trace_replay: Option<IgnoredAny>,
    conversation_replay: Option<IgnoredAny>,
    sharegpt4video: Option<IgnoredAny>,
}

fn mock() -> String {
    "mock".to_owned()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code, reason = "keys inference-perf knows are accepted and not read")]
struct SharedPrefixSpec {
    #[serde(default = "ten", alias = "num_unique_system_prompts")]
    num_groups: u64,
    #[serde(default = "ten", alias = "num_users_per_system_prompt")]
    num_prompts_per_group: u64,
    #[serde(default = "hundred")]
    system_prompt_len: Length,
    #[serde(default = "fifty")]
    question_len: Length,
    #[serde(default = "fifty")]
    output_len: Length,
    #[serde(default)]
    enable_multi_turn_chat: bool,
    /// inference-perf's own prompt seed; the replay's ids are seeded by the run.
    seed: Option<IgnoredAny>,
    question_distribution: Option<IgnoredAny>,
    output_distribution: Option<IgnoredAny>,
    multimodal: Option<IgnoredAny>,
}

/// A length: a token count, or one of inference-perf's distributions (a
/// mapping), which the replay refuses by name.
#[derive(Deserialize)]
#[serde(untagged)]
enum Length {
    Fixed(u32),
    Other(serde_json::Value),
}

// inference-perf's `SharedPrefix` defaults (config/datagen/config.py).
fn ten() -> u64 {
    10
}
fn hundred() -> Length {
    Length::Fixed(100)
}
fn fifty() -> Length {
    Length::Fixed(50)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code, reason = "keys inference-perf knows are accepted and not read")]
struct LoadSpec {
    #[serde(rename = "type", default = "constant")]
    kind: String,
    /// inference-perf's default pause between stages (loadgen/config.py).
    #[serde(default = "one")]
    interval: f64,
    #[serde(default)]
    stages: Vec<StageSpec>,
    sweep: Option<IgnoredAny>,
    trace: Option<IgnoredAny>,
    lora_traffic_split: Option<IgnoredAny>,
    // The client's workers, limits and retries: how, not what, it sends.
    num_workers: Option<IgnoredAny>,
    worker_max_concurrency: Option<IgnoredAny>,
    worker_max_tcp_connections: Option<IgnoredAny>,
    circuit_breakers: Option<IgnoredAny>,
    request_timeout: Option<IgnoredAny>,
    request_retries: Option<IgnoredAny>,
    request_retry_backoff_sec: Option<IgnoredAny>,
    stage_teardown_grace_seconds: Option<IgnoredAny>,
    base_seed: Option<IgnoredAny>,
}

fn constant() -> String {
    "constant".to_owned()
}
fn one() -> f64 {
    1.0
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code, reason = "keys inference-perf knows are accepted and not read")]
struct StageSpec {
    rate: f64,
    duration: f64,
    num_requests: Option<IgnoredAny>,
    concurrency_level: Option<IgnoredAny>,
}

/// Reads the config at `path` and builds its requests, seeded by the run.
pub(super) fn open(path: &Path, options: &ImportOptions) -> Result<Requests, ImportError> {
    let (run, _) = read(path)?;
    let (sends, _) = run.schedule(options.seed);
    Ok(Box::new((0..run.count(&sends)).map(move |i| Ok(run.request(i, &sends)))))
}

/// The config at `path`, resolved, and its text.
fn read(path: &Path) -> Result<(SharedPrefixRun, String), ImportError> {
    use std::io::Read;
    let file = path.display().to_string();
    let mut text = String::new();
    super::common::open_file(path)?
        .read_to_string(&mut text)
        .map_err(|e| ImportError::new(&file, 0, "file", format!("cannot read: {e}")))?;
    let config: Config = crate::yaml::parse(&text).map_err(|e| {
        let (column, reason) = match e.message.split_once(": ") {
            Some((k, r)) if !k.contains(' ') => (k.to_owned(), r.to_owned()),
            _ => ("yaml".to_owned(), e.message.clone()),
        };
        ImportError::new(&file, e.line, &column, reason)
    })?;
    let at = |field: &str, reason: String| {
        let line = crate::yaml::locate(path, &text, field);
        let line = line.rsplit_once(':').and_then(|(_, l)| l.parse().ok()).unwrap_or(0);
        ImportError::new(&file, line, field, reason)
    };
    let data =
        config.data.ok_or_else(|| at("data", "missing: the replay needs `data: {type: shared_prefix, …}`".into()))?;
    if data.kind != "shared_prefix" {
        return Err(at(
            "data.type",
            format!(
                "`{}` is not replayed: only shared_prefix is (its prompts are generated from the config alone)",
                data.kind
            ),
        ));
    }
    let p = data.shared_prefix.ok_or_else(|| at("data.shared_prefix", "missing".into()))?;
    for (field, given) in [
        ("question_distribution", p.question_distribution.is_some()),
        ("output_distribution", p.output_distribution.is_some()),
        ("multimodal", p.multimodal.is_some()),
    ] {
        if given {
            return Err(at(
                &format!("data.shared_prefix.{field}"),
                "not replayed: give fixed question_len and output_len".into(),
            ));
        }
    }
    let load = config.load.ok_or_else(|| at("load", "missing: the replay needs `load: {stages: …}`".into()))?;
    let kind = match load.kind.as_str() {
        "constant" => Load::Constant,
        "poisson" => Load::Poisson,
        other => {
            return Err(at(
                "load.type",
                format!("`{other}` is not replayed: constant and poisson are (rate-driven stages)"),
            ));
        }
    };
    if load.sweep.is_some() {
        return Err(at("load.sweep", "not replayed: a sweep probes the real server for its stages".into()));
    }
    for (k, s) in load.stages.iter().enumerate() {
        if s.num_requests.is_some() || s.concurrency_level.is_some() {
            return Err(at(
                &format!("load.stages[{k}]"),
                "num_requests and concurrency_level belong to the concurrent load type".into(),
            ));
        }
    }
    let length = |field: &str, l: &Length| match l {
        Length::Fixed(n) => Ok(*n),
        Length::Other(v) => Err(at(
            &format!("data.shared_prefix.{field}"),
            format!("`{v}` is not replayed: give a fixed token count (length distributions are not)"),
        )),
    };
    let run = SharedPrefixRun {
        groups: p.num_groups,
        prompts_per_group: p.num_prompts_per_group,
        system_prompt_len: length("system_prompt_len", &p.system_prompt_len)?,
        question_len: length("question_len", &p.question_len)?,
        output_len: length("output_len", &p.output_len)?,
        multi_turn: p.enable_multi_turn_chat,
        load: kind,
        interval_s: load.interval,
        stages: load.stages.iter().map(|s| Stage { rate: s.rate, duration: s.duration }).collect(),
    };
    if let Err((field, reason)) = run.check() {
        let field = match field.as_str() {
            f if f.starts_with("stages") || f == "interval" => format!("load.{f}"),
            f => format!("data.shared_prefix.{f}"),
        };
        return Err(at(&field, reason));
    }
    Ok((run, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/import/inference-perf").join(name)
    }

    fn prompt(r: &Request, node: usize) -> &[u32] {
        match &r.sub_requests[node].kind {
            NodeKind::Llm(c) => c.input_token_ids.as_deref().unwrap(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_single_turn_config_sends_rate_times_duration_over_its_pool() {
        // Hand-checked: 2 stages (4/s x 5 s, 10/s x 2 s) 1 s apart: 20 + 20
        // requests; 3 system prompts x 2 questions = 6 prompts of 64 + 16 tokens.
        let (run, _) = read(&fixture("shared-prefix.yaml")).unwrap();
        let (requests, stages) = run.requests(7);
        assert_eq!(stages, [(0.0, 5.0), (6.0, 8.0)]);
        assert_eq!(requests.len(), 40);
        assert_eq!(requests.iter().filter(|r| r.arrival_time < 5.0).count(), 20);
        assert!(requests[20].arrival_time == 6.0 && requests[39].arrival_time < 8.0);
        assert!(requests.windows(2).all(|w| w[0].arrival_time <= w[1].arrival_time));
        for r in &requests {
            let NodeKind::Llm(c) = &r.sub_requests[0].kind else { panic!() };
            assert_eq!((c.input_tokens, c.output_tokens), (80, 12));
        }
        // Prompt k mod 6: the same 6 requests later; group k mod 6 mod 3.
        assert_eq!(prompt(&requests[0], 0), prompt(&requests[6], 0));
        assert_eq!(prompt(&requests[1], 0)[..64], prompt(&requests[4], 0)[..64]);
        assert_ne!(prompt(&requests[1], 0)[64..], prompt(&requests[4], 0)[64..]);
        assert_ne!(prompt(&requests[1], 0)[..64], prompt(&requests[2], 0)[..64]);
        // Seeded by the run: another seed, other arrivals, same prompts.
        let (other, _) = run.requests(8);
        assert_ne!(other[5].arrival_time, requests[5].arrival_time);
        assert_eq!(prompt(&other[5], 0), prompt(&requests[5], 0));
    }

    #[test]
    fn multi_turn_users_carry_their_conversation() {
        // 2 x 2 users, 1 stage of 2/s x 5 s = 10 requests: users 0 and 1 get 3
        // rounds, 2 and 3 get 2; round r's prompt = sys 8 + r(5 + 3) + 5.
        let (run, _) = read(&fixture("multi-turn.yaml")).unwrap();
        assert_eq!(run.load, Load::Poisson);
        let run = SharedPrefixRun { load: Load::Constant, ..run };
        let (requests, _) = run.requests(1);
        assert_eq!(requests.len(), 4);
        let rounds: Vec<usize> = requests.iter().map(|r| r.sub_requests.len()).collect();
        assert_eq!(rounds, [3, 3, 2, 2]);
        let u0 = &requests[0];
        let lens: Vec<usize> = (0..3).map(|n| prompt(u0, n).len()).collect();
        assert_eq!(lens, [13, 21, 29]);
        // Each round extends the last prompt with its answer and a question.
        let NodeKind::Llm(c0) = &u0.sub_requests[0].kind else { panic!() };
        assert_eq!(&prompt(u0, 1)[..13], prompt(u0, 0));
        assert_eq!(&prompt(u0, 1)[13..16], c0.output_token_ids.as_deref().unwrap());
        assert_eq!(u0.sub_requests[0].next, [1]);
        assert!(u0.sub_requests[1].interval > 0.0);
        // Users 0 and 2 share system prompt 0; 1 and 3 prompt 1.
        assert_eq!(prompt(&requests[0], 0)[..8], prompt(&requests[2], 0)[..8]);
        assert_ne!(prompt(&requests[0], 0)[..8], prompt(&requests[1], 0)[..8]);
    }

    #[test]
    fn poisson_stages_stay_inside_their_seconds() {
        let (run, _) = read(&fixture("multi-turn.yaml")).unwrap();
        let run = SharedPrefixRun { multi_turn: false, stages: vec![Stage { rate: 50.0, duration: 2.5 }], ..run };
        let (sends, _) = run.schedule(3);
        assert!(sends.iter().all(|&t| t < 2.5));
        assert!(sends.windows(2).all(|w| w[0] <= w[1]));
        // About 125 requests (Poisson, sd 11).
        assert!((80..170).contains(&sends.len()), "{}", sends.len());
        assert!(sends.iter().any(|&t| t >= 2.0), "the half second is sent");
    }

    #[test]
    fn bad_configs_name_their_key_and_line() {
        let dir = std::env::temp_dir().join(format!("ip-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (text, line, column) in [
            (
                "data:\n  type: shared_prefix\n  shared_prefix:\n    bogus: 1\nload:\n  stages: []\n",
                4,
                "data.shared_prefix",
            ),
            ("data:\n  type: random\nload:\n  stages: [{rate: 1, duration: 1}]\n", 2, "data.type"),
            (
                "data:\n  type: shared_prefix\n  shared_prefix: {output_len: 0}\nload:\n  stages: [{rate: 1, duration: 1}]\n",
                3,
                "data.shared_prefix.output_len",
            ),
            (
                "data:\n  type: shared_prefix\n  shared_prefix: {}\nload:\n  type: concurrent\n  stages: []\n",
                5,
                "load.type",
            ),
            (
                "data:\n  type: shared_prefix\n  shared_prefix: {}\nload:\n  stages:\n    - {rate: -1, duration: 1}\n",
                5,
                "load.stages[0]",
            ),
            (
                "data:\n  type: shared_prefix\n  shared_prefix: {}\nload:\n  stages: [{rate: 1, duration: 1}]\nextra: 1\n",
                6,
                "extra",
            ),
            (
                "data:\n  type: shared_prefix\n  shared_prefix:\n    output_len: {mean: 5}\nload:\n  stages: [{rate: 1, duration: 1}]\n",
                4,
                "data.shared_prefix.output_len",
            ),
        ] {
            let p = dir.join("c.yaml");
            std::fs::write(&p, text).unwrap();
            let e = read(&p).err().unwrap_or_else(|| panic!("{text}: accepted"));
            assert_eq!(e.line, line, "{text}: {e}");
            assert!(e.column.starts_with(column) || e.reason.contains(column), "{text}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
