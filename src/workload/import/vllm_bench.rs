//! `vllm-bench`: the result file of `vllm bench serve --save-result
//! --save-detailed` (vLLM's `vllm/benchmarks/serve.py`): one JSON object
//! holding the run's settings (`model_id`, `num_prompts`, `request_rate` — a
//! number or `"inf"` —, `burstiness`, `max_concurrency`, `ramp_up_strategy`
//! when ramped) and, per request in send order, `input_lens`, `output_lens`,
//! `ttfts` (s), `itls` (a list of gaps, s, per request), `latencies` (s),
//! `start_times` (the client's `perf_counter` at send), `queue_times` (the
//! wait for a `--max-concurrency` slot), `generated_texts` and `errors`
//! (empty for a success). Without `--save-detailed` the per-request lists
//! are absent and there is nothing to import.
//!
//! Mapping, request `i` (its index in the lists, kept as its id):
//! - One llm call of `input_lens[i]` prompt and `output_lens[i]` output
//!   tokens. The file has no prompt text, so no token ids: no prefix-cache
//!   hits (the default `random` dataset's prompts share none either).
//! - Arrival: from `start_times` where the file has them — the send time
//!   less `queue_times` (the client's own wait for a slot, which the
//!   simulator's capped client replays), from the earliest request; in the
//!   baseline, the send time (as a capped client's result rows have it: the
//!   measured latencies count from the send). Else a
//!   fresh draw of vLLM's own arrival process, seeded: gaps exponential at
//!   `request_rate` (`burstiness` 1, a Poisson process) or gamma with shape
//!   `burstiness` and mean `1 / request_rate` (vLLM's `get_request`); the
//!   first request at 0; `"inf"`: all at 0. A ramp-up run without start
//!   times is refused (its rates are not reproduced).
//! - `max_concurrency` is the client's cap: `run --input` applies it unless
//!   `--concurrency` is given ([`max_concurrency`]); `convert` says it.
//! - A failed request (`errors[i]` not empty, or no output) is dropped, from
//!   the workload and the baseline alike, and counted.
//! - Baseline ([`convert`]): TTFT then the ITL list, per token, where the list
//!   has `output − 1` gaps (one token a streamed chunk); where a chunk carried
//!   several tokens it has fewer, and the request's E2E (`latencies`, else
//!   TTFT + the gaps) − TTFT is spread evenly over its tokens after the
//!   first ([`super::common::spread`]), counted in the notes.
//!
//! A replay ([`open`]) streams the file, one entry of each list at a time
//! (`stream.rs`), unless its recorded arrivals are out of send order;
//! [`convert`], which builds the baseline, reads it whole. Both read a
//! request through one function (`row`).
//!
//! Every error names the file, the object's line and the key with the
//! request's index (`ttfts[3]`).

use std::io::Read;
use std::path::Path;

use rand::SeedableRng;
use rand_distr::Distribution;
use rand_xoshiro::Xoshiro256PlusPlus;

mod stream;

use super::common::{ImportError, ImportOptions, Requests, one_call, open_file, spread, tokens};
use crate::workload::types::{LlmCall, NodeResult, Request};

/// A result file, read: the requests that succeeded, in arrival order.
#[derive(Debug, Clone)]
pub struct Bench {
    /// What was sent (no latencies).
    pub workload: Vec<Request>,
    /// The same requests with the measured TTFT and ITLs.
    pub baseline: Vec<Request>,
    /// The client's `--max-concurrency`, where it had one.
    pub max_concurrency: Option<u32>,
    /// What the reading assumed or dropped, for the user.
    pub notes: Vec<String>,
}

/// Opens `path` as a workload (arrivals seeded by `options.seed` where the
/// file has no start times): streamed ([`stream`]) unless its recorded
/// arrivals are out of send order, which only the whole file can sort.
pub(super) fn open(path: &Path, options: &ImportOptions) -> Result<Requests, ImportError> {
    if let Some(requests) = stream::requests(path, options.seed)? {
        return Ok(requests);
    }
    Ok(Box::new(read(path, options.seed, false)?.workload.into_iter().map(Ok)))
}

/// The client's `max_concurrency` of the result file `path` (`None`: none,
/// or `null`). The file is scanned, not held.
pub fn max_concurrency(path: &Path) -> Result<Option<u32>, ImportError> {
    let layout = stream::Layout::read(path)?;
    cap(&layout.file, layout.line, layout.value("max_concurrency"))
}

/// The workload and the per-token baseline of the result file `path`.
pub fn convert(path: &Path, seed: u64) -> Result<Bench, ImportError> {
    read(path, seed, true)
}

/// The file's one JSON object, with its file name and first line.
fn object(path: &Path) -> Result<(String, u64, serde_json::Map<String, serde_json::Value>), ImportError> {
    let file = path.display().to_string();
    let mut text = String::new();
    open_file(path)?.read_to_string(&mut text).map_err(|e| ImportError::new(&file, 1, "file", e.to_string()))?;
    let line_at = |offset: usize| 1 + text[..offset.min(text.len())].bytes().filter(|&b| b == b'\n').count() as u64;
    let start = text.len() - text.trim_start().len();
    let mut values = serde_json::Deserializer::from_str(&text).into_iter::<serde_json::Value>();
    let value = match values.next() {
        None => return Err(ImportError::new(&file, 1, "file", "empty: no result object")),
        Some(Err(e)) => return Err(ImportError::new(&file, e.line().max(1) as u64, "json", e.to_string())),
        Some(Ok(v)) => v,
    };
    let line = line_at(start);
    let serde_json::Value::Object(object) = value else {
        return Err(ImportError::new(&file, line, "json", NOT_AN_OBJECT));
    };
    let end = values.byte_offset();
    if !text[end..].trim().is_empty() {
        let next = end + (text[end..].len() - text[end..].trim_start().len());
        return Err(ImportError::new(&file, line_at(next), "json", SECOND_RESULT));
    }
    Ok((file, line, object))
}

/// The file is not one JSON object.
const NOT_AN_OBJECT: &str = "not an object (vllm bench serve writes one)";
/// Something follows the object.
const SECOND_RESULT: &str = "a second result follows (a file of --append-result): give one run per file";

/// `max_concurrency`'s value, checked.
fn cap(file: &str, line: u64, value: Option<&serde_json::Value>) -> Result<Option<u32>, ImportError> {
    match value {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => v.as_u64().and_then(|n| u32::try_from(n).ok()).filter(|&n| n >= 1).map(Some).ok_or_else(|| {
            ImportError::new(file, line, "max_concurrency", format!("{v} is not a count of at least 1"))
        }),
    }
}

/// The per-request lists: those a replay needs, then those it may use.
const NEEDED: [&str; 4] = ["input_lens", "output_lens", "ttfts", "itls"];
const OPTIONAL: [&str; 4] = ["errors", "latencies", "start_times", "queue_times"];

/// Why a needed list is missing.
const NO_DETAIL: &str = "missing: the file has no per-request data (write it with --save-result --save-detailed)";

/// The needed lists, then the optional ones (each `None` when absent).
type Found<T> = ([T; 4], [Option<T>; 4]);

/// The per-request lists, each found by `list` (`None`: absent; an error:
/// not a list): the [`NEEDED`] ones, which must be there, and the
/// [`OPTIONAL`] ones, every one as long as `input_lens` (`len`). Checked in
/// one order for the whole path and the streamed one.
fn per_request_lists<T: Copy>(
    bad: &dyn Fn(&str, String) -> ImportError,
    list: &dyn Fn(&str) -> Result<Option<T>, ImportError>,
    len: impl Fn(T) -> usize,
) -> Result<Found<T>, ImportError> {
    let [a, b, c, d] = NEEDED.map(|key| list(key)?.ok_or_else(|| bad(key, NO_DETAIL.to_owned())));
    let needed = [a?, b?, c?, d?];
    let [a, b, c, d] = OPTIONAL.map(list);
    let optional = [a?, b?, c?, d?];
    let n = len(needed[0]);
    let lens = needed[1..].iter().map(|&l| Some(len(l))).chain(optional.iter().map(|l| l.map(&len)));
    for (key, l) in NEEDED[1..].iter().chain(&OPTIONAL).zip(lens) {
        if let Some(l) = l.filter(|&l| l != n) {
            return Err(bad(key, format!("{l} entries where input_lens has {n}")));
        }
    }
    Ok((needed, optional))
}

/// Request `i`'s entries of the per-request lists.
struct Entries<'a> {
    input: &'a serde_json::Value,
    output: &'a serde_json::Value,
    ttft: &'a serde_json::Value,
    itls: &'a serde_json::Value,
    error: Option<&'a serde_json::Value>,
    latency: Option<&'a serde_json::Value>,
}

/// A request of the file that succeeded: its request, its measured twin
/// (with the baseline), and whether its ITLs were spread.
struct Kept {
    request: Request,
    measured: Option<Request>,
    spread: bool,
}

/// A list entry in seconds, checked (`key[i]` names it).
fn seconds(
    bad: &dyn Fn(&str, String) -> ImportError,
    key: &str,
    i: usize,
    v: &serde_json::Value,
) -> Result<f64, ImportError> {
    let at = |reason: String| bad(&format!("{key}[{i}]"), reason);
    let s = v.as_f64().ok_or_else(|| at(format!("{v} is not a number of seconds")))?;
    if s < 0.0 {
        return Err(at(format!("{s} is negative")));
    }
    super::common::seconds_in(s).map_err(at)
}

/// Request `i` from its entries, arriving at `arrival` and sent at `send`
/// (s): the one reading of a request, for the whole path and the streamed
/// one. `None`: it failed (an error, or no output) and is left out.
fn row(
    bad: &dyn Fn(&str, String) -> ImportError,
    i: usize,
    e: &Entries,
    (arrival, send): (f64, f64),
    with_baseline: bool,
) -> Result<Option<Kept>, ImportError> {
    let at = |key: &str, reason: String| bad(&format!("{key}[{i}]"), reason);
    let count = |key: &str, v: &serde_json::Value, min: i64| -> Result<u32, ImportError> {
        let c = v.as_i64().ok_or_else(|| at(key, format!("{v} is not a count")))?;
        tokens(c, min).map_err(|e| at(key, e))
    };
    let output = count("output_lens", e.output, 0)?;
    let error = match e.error {
        None | Some(serde_json::Value::Null) => false,
        Some(serde_json::Value::String(s)) => !s.is_empty(),
        Some(v) => return Err(at("errors", format!("{v} is not a string"))),
    };
    if error || output == 0 {
        return Ok(None);
    }
    let input = count("input_lens", e.input, 1)?;
    let ttft = seconds(bad, "ttfts", i, e.ttft)?;
    let gaps: Vec<f64> = match e.itls {
        serde_json::Value::Array(a) => {
            let gap = |g: &serde_json::Value| {
                g.as_f64().filter(|x| *x >= 0.0).and_then(|x| super::common::seconds_in(x).ok())
            };
            a.iter().map(|g| gap(g).ok_or_else(|| at("itls", format!("{g} is not a gap in seconds")))).collect()
        }
        v => Err(at("itls", format!("{v} is not a list of gaps"))),
    }?;
    // Chunks of several tokens: the E2E to spread, checked either way.
    let e2e = if gaps.len() + 1 == output as usize {
        None
    } else {
        let e2e = match e.latency {
            Some(l) => seconds(bad, "latencies", i, l)?,
            None => ttft + gaps.iter().sum::<f64>(),
        };
        if e2e < ttft {
            return Err(at("latencies", format!("{e2e} s is shorter than the TTFT ({ttft} s)")));
        }
        Some(e2e)
    };
    // The file has no prompts: lengths only.
    let request = one_call(i as u64, arrival, LlmCall::new(input, output));
    let measured = with_baseline.then(|| {
        let token_latency = match e2e {
            None => std::iter::once(ttft).chain(gaps).collect(),
            Some(e2e) => spread(ttft, e2e, output),
        };
        // A baseline row arrives at its send, as a capped client's result
        // rows do (its latencies count from there).
        let mut measured = one_call(i as u64, send, LlmCall::new(input, output));
        measured.sub_requests[0].result = Some(NodeResult { token_latency, error: None, replica: None });
        measured
    });
    Ok(Some(Kept { request, measured, spread: e2e.is_some() }))
}

/// Reads `path` whole (see the module doc); the baseline only
/// `with_baseline` (a replay needs none: its per-token latencies were 2 KB
/// a chat request, the run's whole input held before it starts), every
/// list checked alike.
fn read(path: &Path, seed: u64, with_baseline: bool) -> Result<Bench, ImportError> {
    let (file, line, object) = object(path)?;
    let bad = |key: &str, reason: String| ImportError::new(&file, line, key, reason);
    let list = |key: &str| -> Result<Option<&Vec<serde_json::Value>>, ImportError> {
        match object.get(key) {
            None => Ok(None),
            Some(serde_json::Value::Array(a)) => Ok(Some(a)),
            Some(_) => Err(bad(key, "not a list".to_owned())),
        }
    };
    let ([input_lens, output_lens, ttfts, itls], [errors, latencies, start_times, queue_times]) =
        per_request_lists(&bad, &list, Vec::len)?;
    let n = input_lens.len();
    let max_concurrency = cap(&file, line, object.get("max_concurrency"))?;
    let timing = arrivals(&bad, &|key| object.get(key), n, start_times, queue_times, seed)?;
    let mut notes = vec![timing.note.clone()];
    let (mut workload, mut baseline) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut failed, mut spread_count) = (0usize, 0usize);
    for i in 0..n {
        let entries = Entries {
            input: &input_lens[i],
            output: &output_lens[i],
            ttft: &ttfts[i],
            itls: &itls[i],
            error: errors.map(|e| &e[i]),
            latency: latencies.map(|l| &l[i]),
        };
        let (arrival, send) = (timing.arrival[i], timing.send[i]);
        match row(&bad, i, &entries, (arrival, send), with_baseline)? {
            None => failed += 1,
            Some(Kept { request, measured, spread }) => {
                spread_count += usize::from(spread);
                workload.push((arrival, request));
                if let Some(m) = measured {
                    baseline.push((send, m));
                }
            }
        }
    }
    // Arrival order, index order among equal arrivals (a stable sort).
    workload.sort_by(|a, b| a.0.total_cmp(&b.0));
    baseline.sort_by(|a, b| a.0.total_cmp(&b.0));
    if failed > 0 {
        notes
            .push(format!("{failed} of {n} requests failed (errors, or no output): left out of workload and baseline"));
    }
    if spread_count > 0 {
        notes.push(format!(
            "{spread_count} requests' ITL lists have fewer than output − 1 gaps (chunks of several tokens): their \
             E2E − TTFT is spread evenly over the tokens after the first"
        ));
    }
    if let Some(c) = max_concurrency {
        notes.push(format!("replay with `blis-sweep run --concurrency {c}`, the benchmark's --max-concurrency"));
    }
    if workload.is_empty() {
        return Err(bad("errors", none_succeeded(n)));
    }
    Ok(Bench {
        workload: workload.into_iter().map(|(_, r)| r).collect(),
        baseline: baseline.into_iter().map(|(_, r)| r).collect(),
        max_concurrency,
        notes,
    })
}

fn none_succeeded(n: usize) -> String {
    format!("none of the {n} requests succeeded: nothing to replay")
}

/// When the requests arrived at the client and when it sent them, s from
/// the first arrival, and how that was found.
struct Timing {
    arrival: Vec<f64>,
    send: Vec<f64>,
    note: String,
}

/// Request `i`'s recorded arrival and send (s, the client's clock): its
/// `start_times` entry less its `queue_times` one.
fn recorded(
    bad: &dyn Fn(&str, String) -> ImportError,
    i: usize,
    start: &serde_json::Value,
    queued: Option<&serde_json::Value>,
) -> Result<(f64, f64), ImportError> {
    let number = |key: &str, v: &serde_json::Value| -> Result<f64, ImportError> {
        v.as_f64().filter(|x| x.is_finite()).ok_or_else(|| bad(&format!("{key}[{i}]"), format!("{v} is not a time")))
    };
    let queued = match queued {
        None | Some(serde_json::Value::Null) => 0.0,
        Some(v) => number("queue_times", v)?,
    };
    if queued < 0.0 {
        return Err(bad(&format!("queue_times[{i}]"), format!("{queued} is negative")));
    }
    let sent = number("start_times", start)?;
    Ok((sent - queued, sent))
}

/// A send time from the first arrival, checked against the clock's range.
fn from_origin(
    bad: &dyn Fn(&str, String) -> ImportError,
    i: usize,
    sent: f64,
    origin: f64,
) -> Result<f64, ImportError> {
    let s = sent - origin;
    crate::workload::checked_seconds_to_us(s).map_err(|e| bad(&format!("start_times[{i}]"), e))?;
    Ok(s)
}

/// Arrivals drawn from vLLM's own arrival process where the file has no
/// start times (see the module doc), one request at a time.
enum Drawn {
    /// `request_rate: inf`: all at 0.
    AtOnce,
    /// Gamma gaps (exponential at burstiness 1).
    Gaps { gamma: rand_distr::Gamma<f64>, rng: Xoshiro256PlusPlus, t: f64, rate: f64, note: String },
}

impl Drawn {
    /// The process the file's `request_rate` and `burstiness` (`get`) name.
    fn new<'a>(
        bad: &dyn Fn(&str, String) -> ImportError,
        get: &dyn Fn(&str) -> Option<&'a serde_json::Value>,
        seed: u64,
    ) -> Result<Drawn, ImportError> {
        if get("ramp_up_strategy").is_some_and(|v| !v.is_null()) {
            return Err(bad(
                "ramp_up_strategy",
                "a ramp-up run without start_times (written by newer vLLM with --save-detailed): its arrivals are \
                 not reproduced"
                    .to_owned(),
            ));
        }
        let rate = match get("request_rate") {
            None => return Err(bad("request_rate", "missing, and no start_times to time the requests by".to_owned())),
            Some(serde_json::Value::String(s)) if s == "inf" => f64::INFINITY,
            Some(v) => {
                v.as_f64().filter(|r| *r > 0.0).ok_or_else(|| bad("request_rate", format!("{v} is not a rate")))?
            }
        };
        if rate.is_infinite() {
            return Ok(Drawn::AtOnce);
        }
        let burstiness = match get("burstiness") {
            None | Some(serde_json::Value::Null) => 1.0,
            Some(v) => v
                .as_f64()
                .filter(|b| b.is_finite() && *b > 0.0)
                .ok_or_else(|| bad("burstiness", format!("{v} is not a positive number")))?,
        };
        // vLLM's `get_request`: gamma gaps of shape `burstiness` and scale
        // 1 / (rate × burstiness) (mean 1 / rate); shape 1 is exponential.
        let gamma = rand_distr::Gamma::new(burstiness, 1.0 / (rate * burstiness))
            .map_err(|e| bad("burstiness", format!("{burstiness} with request_rate {rate}: {e}")))?;
        let process = if burstiness == 1.0 { "Poisson".to_owned() } else { format!("gamma, burstiness {burstiness}") };
        let note =
            format!("arrivals: drawn ({process}) at request_rate {rate}/s, seed {seed}: the file has no start_times");
        Ok(Drawn::Gaps { gamma, rng: Xoshiro256PlusPlus::seed_from_u64(seed), t: 0.0, rate, note })
    }

    /// Request `i`'s arrival (requests drawn in index order).
    fn next(&mut self, bad: &dyn Fn(&str, String) -> ImportError, i: usize) -> Result<f64, ImportError> {
        let Drawn::Gaps { gamma, rng, t, rate, .. } = self else { return Ok(0.0) };
        let at = (*t * 1e6).round() / 1e6;
        crate::workload::checked_seconds_to_us(at)
            .map_err(|e| bad("request_rate", format!("{rate}/s puts request {i} at {at:e} s: {e}")))?;
        *t += gamma.sample(rng);
        Ok(at)
    }

    fn note(&self) -> String {
        match self {
            Drawn::AtOnce => "arrivals: all at 0 (request_rate inf)".to_owned(),
            Drawn::Gaps { note, .. } => note.clone(),
        }
    }
}

/// Every request's [`Timing`].
fn arrivals<'a>(
    bad: &dyn Fn(&str, String) -> ImportError,
    get: &dyn Fn(&str) -> Option<&'a serde_json::Value>,
    n: usize,
    start_times: Option<&Vec<serde_json::Value>>,
    queue_times: Option<&Vec<serde_json::Value>>,
    seed: u64,
) -> Result<Timing, ImportError> {
    if let Some(starts) = start_times {
        let (mut arrival, mut send) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for (i, s) in starts.iter().enumerate() {
            let (a, sent) = recorded(bad, i, s, queue_times.map(|q| &q[i]))?;
            send.push(sent);
            arrival.push(a);
        }
        let origin = arrival.iter().copied().fold(f64::INFINITY, f64::min);
        for (i, (a, s)) in arrival.iter_mut().zip(&mut send).enumerate() {
            *s = from_origin(bad, i, *s, origin)?;
            *a -= origin;
        }
        return Ok(Timing { arrival, send, note: recorded_note(queue_times.is_some()) });
    }
    let mut drawn = Drawn::new(bad, get, seed)?;
    let arrival = (0..n).map(|i| drawn.next(bad, i)).collect::<Result<Vec<f64>, _>>()?;
    Ok(Timing { send: arrival.clone(), arrival, note: drawn.note() })
}

fn recorded_note(queue_times: bool) -> String {
    let how = if queue_times { "start_times less queue_times" } else { "start_times" };
    format!("arrivals: the recorded ones ({how}), from the first; the baseline's at the sends")
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = include_str!("../../../tests/data/import/vllm_bench/result.json");

    fn read_str(text: &str, seed: u64) -> Result<Bench, ImportError> {
        let dir = std::env::temp_dir().join(format!("blis-vllm-bench-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let path = dir.join(N.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_string());
        std::fs::write(&path, text).unwrap();
        let r = read(&path, seed, true);
        let _ = std::fs::remove_file(&path);
        r
    }

    fn node(r: &Request) -> (&crate::workload::types::LlmCall, Option<&Vec<f64>>) {
        let crate::workload::types::NodeKind::Llm(c) = &r.sub_requests[0].kind else { panic!() };
        (c, r.sub_requests[0].result.as_ref().map(|x| &x.token_latency))
    }

    #[test]
    fn the_fixture_reads_as_hand_checked() {
        let b = read_str(FIXTURE, 0).unwrap();
        // 6 requests, request 4 failed: 5 kept. Sent at 100.0, 100.25,
        // 100.5, 100.75, (101.0 failed), 101.25; request 3 waited 0.05 s for
        // a slot, so it arrived at 100.70.
        let ids: Vec<String> = b.workload.iter().map(|r| r.request_id.to_string()).collect();
        assert_eq!(ids, ["0", "1", "2", "3", "5"]);
        let arrivals: Vec<f64> = b.workload.iter().map(|r| r.arrival_time).collect();
        assert_eq!(arrivals, [0.0, 0.25, 0.5, 0.7, 1.25]);
        // The baseline's rows arrive at their sends.
        let sends: Vec<f64> = b.baseline.iter().map(|r| r.arrival_time).collect();
        assert_eq!(sends, [0.0, 0.25, 0.5, 0.75, 1.25]);
        let lens: Vec<(u32, u32)> =
            b.workload.iter().map(|r| (node(r).0.input_tokens, node(r).0.output_tokens)).collect();
        assert_eq!(lens, [(12, 4), (20, 3), (8, 5), (16, 2), (10, 3)]);
        assert!(b.workload.iter().all(|r| node(r).0.input_token_ids.is_none() && node(r).1.is_none()));
        // Per token: TTFT then the ITLs, exactly.
        assert_eq!(node(&b.baseline[0]).1.unwrap(), &vec![0.05, 0.02, 0.021, 0.019]);
        // Request 2's chunks carried 5 tokens in 3: latency 0.2 − TTFT 0.04
        // spread over 4 gaps of 0.04.
        let spread = node(&b.baseline[2]).1.unwrap();
        assert_eq!(spread.len(), 5);
        assert!(spread[1..].iter().all(|g| (g - 0.04).abs() < 1e-12), "{spread:?}");
        assert_eq!(b.max_concurrency, Some(4));
        let notes = b.notes.join("\n");
        assert!(notes.contains("1 of 6 requests failed"), "{notes}");
        assert!(notes.contains("1 requests' ITL lists"), "{notes}");
        assert!(notes.contains("--concurrency 4"), "{notes}");
    }

    #[test]
    fn a_replay_reads_the_same_workload_without_the_baseline() {
        let path = std::env::temp_dir().join(format!("blis-vllm-bench-replay-{}", std::process::id()));
        std::fs::write(&path, FIXTURE).unwrap();
        let (replay, whole) = (read(&path, 0, false).unwrap(), read(&path, 0, true).unwrap());
        let _ = std::fs::remove_file(&path);
        assert!(replay.baseline.is_empty());
        assert_eq!(whole.baseline.len(), 5);
        assert_eq!(format!("{:?}", replay.workload), format!("{:?}", whole.workload));
        assert_eq!(replay.notes, whole.notes);
    }

    #[test]
    fn without_start_times_arrivals_follow_the_rate() {
        let mut v: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
        let o = v.as_object_mut().unwrap();
        o.remove("start_times");
        o.remove("queue_times");
        let b = read_str(&v.to_string(), 7).unwrap();
        let a: Vec<f64> = b.workload.iter().map(|r| r.arrival_time).collect();
        assert_eq!(a[0], 0.0);
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(a, read_str(&v.to_string(), 7).unwrap().workload.iter().map(|r| r.arrival_time).collect::<Vec<_>>());
        assert_ne!(a, read_str(&v.to_string(), 8).unwrap().workload.iter().map(|r| r.arrival_time).collect::<Vec<_>>());
        v["request_rate"] = serde_json::json!("inf");
        let b = read_str(&v.to_string(), 7).unwrap();
        assert!(b.workload.iter().all(|r| r.arrival_time == 0.0));
        v.as_object_mut().unwrap().remove("request_rate");
        let e = read_str(&v.to_string(), 7).unwrap_err();
        assert_eq!((e.line, e.column.as_str()), (1, "request_rate"));
    }

    #[test]
    fn bad_entries_are_named_by_key_and_index() {
        let mut v: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
        v["ttfts"][2] = serde_json::json!(-1.0);
        let e = read_str(&v.to_string(), 0).unwrap_err();
        assert_eq!((e.line, e.column.as_str()), (1, "ttfts[2]"), "{e}");
        let mut v: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
        v["itls"][1][0] = serde_json::json!("x");
        let e = read_str(&v.to_string(), 0).unwrap_err();
        assert_eq!(e.column, "itls[1]", "{e}");
        let mut v: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
        v["output_lens"].as_array_mut().unwrap().pop();
        assert!(read_str(&v.to_string(), 0).unwrap_err().to_string().contains("output_lens: 5 entries where"));
        let e = read_str(&format!("{}\n{}", FIXTURE.trim(), FIXTURE.trim()), 0).unwrap_err();
        assert_eq!((e.line, e.column.as_str()), (2, "json"), "{e}");
        let mut v: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
        v.as_object_mut().unwrap().remove("itls");
        assert!(read_str(&v.to_string(), 0).unwrap_err().to_string().contains("--save-detailed"));
    }

    /// `text` in a file, read by the streamed path (`None`: it declined)
    /// and by the whole one (replay), each as requests or an error.
    type Read = Result<Vec<Request>, ImportError>;

    fn both(text: &str, seed: u64) -> (Option<Read>, Read) {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("blis-vllm-bench-stream-{}-{n}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let streamed = match stream::requests(&path, seed) {
            Ok(Some(r)) => Some(r.collect::<Result<Vec<_>, _>>()),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        };
        let whole = read(&path, seed, false).map(|b| b.workload);
        let _ = std::fs::remove_file(&path);
        (streamed, whole)
    }

    fn same(text: &str, seed: u64) {
        let (streamed, whole) = both(text, seed);
        let streamed = streamed.expect("streamed");
        match (streamed, whole) {
            (Ok(s), Ok(w)) => assert_eq!(format!("{s:?}"), format!("{w:?}")),
            (Err(s), Err(w)) => assert_eq!((s.line, s.column, s.reason), (w.line, w.column, w.reason)),
            (s, w) => panic!("streamed {s:?}, whole {w:?}"),
        }
    }

    #[test]
    fn the_streamed_replay_reads_what_the_whole_file_does() {
        // Recorded arrivals (one queued for a slot), a failed request.
        same(FIXTURE, 0);
        let mut v: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
        // Pretty-printed, strings holding the scanner's delimiters.
        v["errors"][4] = serde_json::json!("Bad \"gateway\", [x]: {y}\\");
        v["generated_texts"][0] = serde_json::json!("]}, \"[");
        same(&serde_json::to_string_pretty(&v).unwrap(), 0);
        // Drawn arrivals, at a rate and all at once.
        let o = v.as_object_mut().unwrap();
        o.remove("start_times");
        o.remove("queue_times");
        same(&v.to_string(), 7);
        v["request_rate"] = serde_json::json!("inf");
        same(&v.to_string(), 7);
    }

    #[test]
    fn the_streamed_replay_fails_where_the_whole_file_does() {
        let edit = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut v: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
            f(&mut v);
            v.to_string()
        };
        same(&edit(&|v| v["ttfts"][2] = serde_json::json!(-1.0)), 0);
        same(&edit(&|v| v["itls"][1][0] = serde_json::json!("x")), 0);
        same(&edit(&|v| v["input_lens"][5] = serde_json::json!(0)), 0);
        same(&edit(&|v| v["start_times"][3] = serde_json::json!("soon")), 0);
        same(&edit(&|v| _ = v["output_lens"].as_array_mut().unwrap().pop()), 0);
        same(&edit(&|v| _ = v.as_object_mut().unwrap().remove("itls")), 0);
        same(&edit(&|v| v["ttfts"] = serde_json::json!(3)), 0);
        same(&edit(&|v| v["max_concurrency"] = serde_json::json!(0)), 0);
        same(&edit(&|v| v["errors"] = serde_json::json!(["x", "x", "x", "x", "x", "x"])), 0);
        same(&format!("{}\n{}", FIXTURE.trim(), FIXTURE.trim()), 0);
        same("[1, 2]", 0);
        same("", 0);
        same("{\"input_lens\": [1, 2", 0);
    }

    #[test]
    fn arrivals_out_of_send_order_are_read_whole() {
        let mut v: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
        // Request 2 waited 0.3 s for a slot: it arrived before request 1.
        v["queue_times"][2] = serde_json::json!(0.3);
        let text = v.to_string();
        let (streamed, whole) = both(&text, 0);
        assert!(streamed.is_none());
        let ids: Vec<String> = whole.unwrap().iter().map(|r| r.request_id.to_string()).collect();
        assert_eq!(ids, ["0", "2", "1", "3", "5"]);
    }

    #[test]
    fn max_concurrency_is_read_from_the_scan() {
        let path = std::env::temp_dir().join(format!("blis-vllm-bench-cap-{}", std::process::id()));
        std::fs::write(&path, FIXTURE).unwrap();
        let cap = max_concurrency(&path);
        let _ = std::fs::remove_file(&path);
        assert_eq!(cap.unwrap(), Some(4));
    }
}
