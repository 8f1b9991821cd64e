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
//! `spec.rs` mirrors the file, `distributions.rs` draws numbers, `shapes.rs`
//! holds a request's shape and bounds; this file streams the requests.
//!
//! Randomness: one xoshiro256++ stream per purpose, seeded from the run's seed
//! and the purpose's name, so adding a feature never shifts another stream.

mod distributions;
mod shapes;
mod spec;

use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Gamma};
use rand_xoshiro::Xoshiro256PlusPlus;

use self::distributions::Clamped;
use self::shapes::{Budget, MAX_PREFIX_TOKENS, MAX_REQUEST_NODES, MAX_REQUEST_TOKENS, Shape};
pub use self::spec::{AgenticSpec, ArrivalSpec, DistSpec, GenerateError, GenerateSpec, PrefixSpec, SessionSpec};
use self::spec::{bad, preset};
use super::types::{LlmCall, NodeKind, Request, RequestId, SubRequest};

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
        let shape = Shape::resolve(spec.sessions.as_ref(), spec.agentic.as_ref(), base)?;
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
        Ok(Request {
            traffic: Default::default(),
            request_id: RequestId::Int(id),
            arrival_time,
            initial: vec![0],
            sub_requests: subs,
        })
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
