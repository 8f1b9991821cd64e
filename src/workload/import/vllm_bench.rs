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
//! Every error names the file, the object's line and the key with the
//! request's index (`ttfts[3]`).

use std::io::Read;
use std::path::Path;

use rand::SeedableRng;
use rand_distr::Distribution;
use rand_xoshiro::Xoshiro256PlusPlus;

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
/// file has no start times).
pub(super) fn open(path: &Path, options: &ImportOptions) -> Result<Requests, ImportError> {
    Ok(Box::new(read(path, options.seed, false)?.workload.into_iter().map(Ok)))
}

/// The client's `max_concurrency` of the result file `path` (`None`: none,
/// or `null`).
pub fn max_concurrency(path: &Path) -> Result<Option<u32>, ImportError> {
    let (file, line, object) = object(path)?;
    cap(&file, line, &object)
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
        return Err(ImportError::new(&file, line, "json", "not an object (vllm bench serve writes one)"));
    };
    let end = values.byte_offset();
    if !text[end..].trim().is_empty() {
        let next = end + (text[end..].len() - text[end..].trim_start().len());
        return Err(ImportError::new(
            &file,
            line_at(next),
            "json",
            "a second result follows (a file of --append-result): give one run per file",
        ));
    }
    Ok((file, line, object))
}

fn cap(file: &str, line: u64, object: &serde_json::Map<String, serde_json::Value>) -> Result<Option<u32>, ImportError> {
    match object.get("max_concurrency") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => v.as_u64().and_then(|n| u32::try_from(n).ok()).filter(|&n| n >= 1).map(Some).ok_or_else(|| {
            ImportError::new(file, line, "max_concurrency", format!("{v} is not a count of at least 1"))
        }),
    }
}

/// Reads `path` (see the module doc); the baseline only `with_baseline`
/// (a replay needs none: its per-token latencies were 2 KB a chat request,
/// the run's whole input held before it starts), every list checked alike.
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
    let needed = |key: &str| {
        list(key)?.ok_or_else(|| {
            bad(
                key,
                "missing: the file has no per-request data (write it with --save-result --save-detailed)".to_owned(),
            )
        })
    };
    let (input_lens, output_lens, ttfts, itls) =
        (needed("input_lens")?, needed("output_lens")?, needed("ttfts")?, needed("itls")?);
    let n = input_lens.len();
    let (errors, latencies, start_times, queue_times) =
        (list("errors")?, list("latencies")?, list("start_times")?, list("queue_times")?);
    for (key, l) in [
        ("output_lens", Some(output_lens)),
        ("ttfts", Some(ttfts)),
        ("itls", Some(itls)),
        ("errors", errors),
        ("latencies", latencies),
        ("start_times", start_times),
        ("queue_times", queue_times),
    ] {
        if let Some(l) = l.filter(|l| l.len() != n) {
            return Err(bad(key, format!("{} entries where input_lens has {n}", l.len())));
        }
    }
    let seconds = |key: &str, i: usize, v: &serde_json::Value| -> Result<f64, ImportError> {
        let at = |reason: String| bad(&format!("{key}[{i}]"), reason);
        let s = v.as_f64().ok_or_else(|| at(format!("{v} is not a number of seconds")))?;
        if s < 0.0 {
            return Err(at(format!("{s} is negative")));
        }
        super::common::seconds_in(s).map_err(at)
    };
    let max_concurrency = cap(&file, line, &object)?;
    let timing = arrivals(&file, line, &object, n, start_times, queue_times, seed)?;
    let mut notes = vec![timing.note.clone()];
    let (mut workload, mut baseline) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut failed, mut spread_count) = (0usize, 0usize);
    for i in 0..n {
        let at = |key: &str, reason: String| bad(&format!("{key}[{i}]"), reason);
        let count = |key: &str, v: &serde_json::Value, min: i64| -> Result<u32, ImportError> {
            let c = v.as_i64().ok_or_else(|| at(key, format!("{v} is not a count")))?;
            tokens(c, min).map_err(|e| at(key, e))
        };
        let output = count("output_lens", &output_lens[i], 0)?;
        let error = match errors.map(|e| &e[i]) {
            None | Some(serde_json::Value::Null) => false,
            Some(serde_json::Value::String(s)) => !s.is_empty(),
            Some(v) => return Err(at("errors", format!("{v} is not a string"))),
        };
        if error || output == 0 {
            failed += 1;
            continue;
        }
        let input = count("input_lens", &input_lens[i], 1)?;
        let ttft = seconds("ttfts", i, &ttfts[i])?;
        let gaps: Vec<f64> = match &itls[i] {
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
            spread_count += 1;
            let e2e = match latencies {
                Some(l) => seconds("latencies", i, &l[i])?,
                None => ttft + gaps.iter().sum::<f64>(),
            };
            if e2e < ttft {
                return Err(at("latencies", format!("{e2e} s is shorter than the TTFT ({ttft} s)")));
            }
            Some(e2e)
        };
        let (arrival, send) = (timing.arrival[i], timing.send[i]);
        // The file has no prompts: lengths only.
        let request = one_call(i as u64, arrival, LlmCall::new(input, output));
        workload.push((arrival, request));
        if with_baseline {
            let token_latency = match e2e {
                None => std::iter::once(ttft).chain(gaps).collect(),
                Some(e2e) => spread(ttft, e2e, output),
            };
            // A baseline row arrives at its send, as a capped client's result
            // rows do (its latencies count from there).
            let mut measured = one_call(i as u64, send, LlmCall::new(input, output));
            measured.sub_requests[0].result = Some(NodeResult { token_latency, error: None, replica: None });
            baseline.push((send, measured));
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
        return Err(bad("errors", format!("none of the {n} requests succeeded: nothing to replay")));
    }
    Ok(Bench {
        workload: workload.into_iter().map(|(_, r)| r).collect(),
        baseline: baseline.into_iter().map(|(_, r)| r).collect(),
        max_concurrency,
        notes,
    })
}

/// When the requests arrived at the client and when it sent them, s from
/// the first arrival, and how that was found.
struct Timing {
    arrival: Vec<f64>,
    send: Vec<f64>,
    note: String,
}

/// Every request's [`Timing`].
fn arrivals(
    file: &str,
    line: u64,
    object: &serde_json::Map<String, serde_json::Value>,
    n: usize,
    start_times: Option<&Vec<serde_json::Value>>,
    queue_times: Option<&Vec<serde_json::Value>>,
    seed: u64,
) -> Result<Timing, ImportError> {
    let bad = |key: &str, reason: String| ImportError::new(file, line, key, reason);
    let number = |key: &str, i: usize, v: &serde_json::Value| -> Result<f64, ImportError> {
        v.as_f64().filter(|x| x.is_finite()).ok_or_else(|| bad(&format!("{key}[{i}]"), format!("{v} is not a time")))
    };
    if let Some(starts) = start_times {
        let (mut arrival, mut send) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for (i, s) in starts.iter().enumerate() {
            let queued = match queue_times.map(|q| &q[i]) {
                None | Some(serde_json::Value::Null) => 0.0,
                Some(v) => number("queue_times", i, v)?,
            };
            if queued < 0.0 {
                return Err(bad(&format!("queue_times[{i}]"), format!("{queued} is negative")));
            }
            let sent = number("start_times", i, s)?;
            send.push(sent);
            arrival.push(sent - queued);
        }
        let origin = arrival.iter().copied().fold(f64::INFINITY, f64::min);
        for (i, (a, s)) in arrival.iter_mut().zip(&mut send).enumerate() {
            (*a, *s) = (*a - origin, *s - origin);
            crate::workload::checked_seconds_to_us(*s).map_err(|e| bad(&format!("start_times[{i}]"), e))?;
        }
        let how = if queue_times.is_some() { "start_times less queue_times" } else { "start_times" };
        let note = format!("arrivals: the recorded ones ({how}), from the first; the baseline's at the sends");
        return Ok(Timing { arrival, send, note });
    }
    if object.get("ramp_up_strategy").is_some_and(|v| !v.is_null()) {
        return Err(bad(
            "ramp_up_strategy",
            "a ramp-up run without start_times (written by newer vLLM with --save-detailed): its arrivals are not \
             reproduced"
                .to_owned(),
        ));
    }
    let rate = match object.get("request_rate") {
        None => return Err(bad("request_rate", "missing, and no start_times to time the requests by".to_owned())),
        Some(serde_json::Value::String(s)) if s == "inf" => f64::INFINITY,
        Some(v) => v.as_f64().filter(|r| *r > 0.0).ok_or_else(|| bad("request_rate", format!("{v} is not a rate")))?,
    };
    if rate.is_infinite() {
        let note = "arrivals: all at 0 (request_rate inf)".to_owned();
        return Ok(Timing { arrival: vec![0.0; n], send: vec![0.0; n], note });
    }
    let burstiness = match object.get("burstiness") {
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
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut t = 0.0f64;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let at = (t * 1e6).round() / 1e6;
        crate::workload::checked_seconds_to_us(at)
            .map_err(|e| bad("request_rate", format!("{rate}/s puts request {i} at {at:e} s: {e}")))?;
        out.push(at);
        t += gamma.sample(&mut rng);
    }
    let process = if burstiness == 1.0 { "Poisson".to_owned() } else { format!("gamma, burstiness {burstiness}") };
    let note =
        format!("arrivals: drawn ({process}) at request_rate {rate}/s, seed {seed}: the file has no start_times");
    Ok(Timing { arrival: out.clone(), send: out, note })
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
}
