//! What the vLLM server is and what it is doing: [`server_info`] reads its
//! release (`GET /version`), the models it serves (`GET /v1/models`) and its
//! KV-cache configuration (the labels of `/metrics`' `vllm:cache_config_info`);
//! [`scrape_loop`] samples `/metrics` every interval until told to stop, and
//! hands each [`MetricsSample`] (queue lengths, KV usage, prefix-cache and
//! token counters) to a sink — [`MetricsSample::write_csv_row`] writes the
//! CSV the CLI keeps. The parsing is pure and tested on text captured from a
//! real vLLM 0.32 server (tests/data/observe/); only the thin fetch functions
//! touch the network.

pub mod prometheus;

use std::io::{self, Write};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

use prometheus::{PromError, PromSample};

/// Why talking to the server failed. `url` is the full URL asked.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// No HTTP exchange: refused, reset, DNS, or a bad base URL.
    #[error("{url}: cannot reach the server: {reason}")]
    Connect {
        /// The URL asked.
        url: String,
        /// The transport error and its causes.
        reason: String,
    },
    /// No complete answer within [`REQUEST_TIMEOUT`].
    #[error("{url}: no answer within {ms} ms")]
    Timeout {
        /// The URL asked.
        url: String,
        /// The timeout.
        ms: u64,
    },
    /// A non-2xx status.
    #[error("{url}: HTTP {status}: {body}")]
    Http {
        /// The URL asked.
        url: String,
        /// The HTTP status code.
        status: u16,
        /// The start of the answer's body.
        body: String,
    },
    /// An answer that is not what a vLLM server sends.
    #[error("{url}: {reason}")]
    Protocol {
        /// The URL asked.
        url: String,
        /// What was wrong with the body.
        reason: String,
    },
    /// A `/metrics` body that is not Prometheus text.
    #[error("{url}: {source}")]
    Metrics {
        /// The URL asked.
        url: String,
        /// The line and why.
        #[source]
        source: PromError,
    },
    /// [`scrape_loop`] was given a zero interval.
    #[error("scrape interval must be at least 1 ms")]
    ZeroInterval,
    /// The sink given to [`scrape_loop`] failed (e.g. the CSV file).
    #[error("writing a metrics sample: {0}")]
    Sink(#[from] io::Error),
}

/// One model `/v1/models` lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServedModel {
    /// The name clients send as `model`.
    pub id: String,
    /// vLLM's context length; absent from servers that are not vLLM.
    pub max_model_len: Option<u32>,
    /// The model path or hub name it was loaded from.
    pub root: Option<String>,
}

/// The labels of `vllm:cache_config_info` (vLLM's `CacheConfig`, written as
/// strings; `"None"` where unset). The typed fields are the ones the
/// simulator's engine config needs; `labels` keeps all of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CacheConfig {
    /// Tokens per KV block.
    pub block_size: Option<u32>,
    /// KV blocks of the engine (on a CPU server too: vLLM's name).
    pub num_gpu_blocks: Option<u64>,
    /// Automatic prefix caching on or off.
    pub enable_prefix_caching: Option<bool>,
    /// `kv_cache_size_tokens`, present in newer releases.
    pub kv_cache_size_tokens: Option<u64>,
    /// The KV cache's dtype (`auto`: the model's).
    pub cache_dtype: Option<String>,
    /// Every label, sorted by name.
    pub labels: Vec<(String, String)>,
}

/// What [`server_info`] learned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerInfo {
    /// `/version`'s `version`, e.g. `0.32.0`.
    pub version: String,
    /// Every model `/v1/models` lists (vLLM: one, under each served name).
    pub models: Vec<ServedModel>,
    /// `None` when `/metrics` has no `vllm:cache_config_info`.
    pub cache: Option<CacheConfig>,
}

impl ServerInfo {
    /// The served model named `id`, if listed.
    pub fn model(&self, id: &str) -> Option<&ServedModel> {
        self.models.iter().find(|m| m.id == id)
    }
}

/// Reads `/version`'s body.
pub fn parse_version(body: &str) -> Result<String, String> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    v.get("version")
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .ok_or_else(|| "no string field \"version\"".to_string())
}

/// Reads `/v1/models`' body (OpenAI's list, with vLLM's `max_model_len`).
pub fn parse_models(body: &str) -> Result<Vec<ServedModel>, String> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    let data = v.get("data").and_then(|d| d.as_array()).ok_or_else(|| "no array field \"data\"".to_string())?;
    let mut models = Vec::with_capacity(data.len());
    for (i, m) in data.iter().enumerate() {
        let id = m.get("id").and_then(|x| x.as_str()).ok_or_else(|| format!("data[{i}]: no string field \"id\""))?;
        let max_model_len = match m.get("max_model_len") {
            None | Some(serde_json::Value::Null) => None,
            Some(x) => Some(
                x.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| format!("data[{i}].max_model_len: {x} is not a token count"))?,
            ),
        };
        let root = m.get("root").and_then(|x| x.as_str()).map(str::to_string);
        models.push(ServedModel { id: id.to_string(), max_model_len, root });
    }
    if models.is_empty() {
        return Err("the server lists no model".to_string());
    }
    Ok(models)
}

/// The KV-cache configuration from `vllm:cache_config_info`'s labels; an
/// error names a label whose value is not of its type.
pub fn cache_config(samples: &[PromSample]) -> Result<Option<CacheConfig>, String> {
    let Some(info) = samples.iter().find(|s| s.name == "vllm:cache_config_info") else {
        return Ok(None);
    };
    let mut labels = info.labels.clone();
    labels.sort();
    // vLLM writes Python's str() of each field: "None" when unset.
    let get = |k: &str| info.label(k).filter(|v| *v != "None");
    fn num<T: std::str::FromStr>(k: &str, v: Option<&str>) -> Result<Option<T>, String> {
        v.map(|s| s.parse::<T>().map_err(|_| format!("cache_config_info {k}={s:?} is not a whole number"))).transpose()
    }
    let enable_prefix_caching = match get("enable_prefix_caching") {
        None => None,
        Some("True") => Some(true),
        Some("False") => Some(false),
        Some(v) => return Err(format!("cache_config_info enable_prefix_caching={v:?} is not True/False")),
    };
    Ok(Some(CacheConfig {
        block_size: num("block_size", get("block_size"))?,
        num_gpu_blocks: num("num_gpu_blocks", get("num_gpu_blocks"))?,
        enable_prefix_caching,
        kv_cache_size_tokens: num("kv_cache_size_tokens", get("kv_cache_size_tokens"))?,
        cache_dtype: get("cache_dtype").map(str::to_string),
        labels,
    }))
}

/// One scrape of `/metrics`: the server's state at `t_us`. A field is `None`
/// when the server does not export that metric (a metric with no sample).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricsSample {
    /// Observe-clock µs when the scrape's answer had arrived (vLLM updates
    /// its gauges after each engine step, so they are at most that fresh).
    pub t_us: u64,
    /// `vllm:num_requests_running`: requests in the running batch.
    pub num_requests_running: Option<f64>,
    /// `vllm:num_requests_waiting`: requests queued for admission.
    pub num_requests_waiting: Option<f64>,
    /// A fraction in [0, 1] despite the name (vLLM's).
    pub kv_cache_usage_perc: Option<f64>,
    /// Counter since the server started: prompt tokens looked up in the
    /// prefix cache.
    pub prefix_cache_queries: Option<f64>,
    /// Counter: prompt tokens found in the prefix cache (whole blocks).
    pub prefix_cache_hits: Option<f64>,
    /// Counter: requests preempted (KV cache full) since the start.
    pub num_preemptions: Option<f64>,
    /// Counter: prompt tokens processed (cached ones included).
    pub prompt_tokens: Option<f64>,
    /// Counter: tokens generated.
    pub generation_tokens: Option<f64>,
}

/// How each column is found: vLLM 0.32's name first (vllm/v1/metrics/
/// loggers.py; counters carry the exposition's `_total`), then the name an
/// older V1 release used (`gpu_` prefix, renamed in vLLM 0.11).
const KV_USAGE: &[&str] = &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"];
const PREFIX_QUERIES: &[&str] = &["vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"];
const PREFIX_HITS: &[&str] = &["vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"];

/// The CSV columns [`MetricsSample::write_csv_row`] writes, in order.
pub const CSV_HEADER: &str = "t_ms,num_requests_running,num_requests_waiting,kv_cache_usage_perc,\
prefix_cache_queries,prefix_cache_hits,num_preemptions,prompt_tokens,generation_tokens";

impl MetricsSample {
    /// Picks the sample's metrics out of a parsed `/metrics` body. With
    /// several engines (data parallel: one label set each), counts and
    /// counters are summed and the KV usage is their mean.
    pub fn from_samples(t_us: u64, samples: &[PromSample]) -> MetricsSample {
        let sum = |names: &[&str]| names.iter().find_map(|n| aggregate(samples, n, false));
        let mean = |names: &[&str]| names.iter().find_map(|n| aggregate(samples, n, true));
        MetricsSample {
            t_us,
            num_requests_running: sum(&["vllm:num_requests_running"]),
            num_requests_waiting: sum(&["vllm:num_requests_waiting"]),
            kv_cache_usage_perc: mean(KV_USAGE),
            prefix_cache_queries: sum(PREFIX_QUERIES),
            prefix_cache_hits: sum(PREFIX_HITS),
            num_preemptions: sum(&["vllm:num_preemptions_total"]),
            prompt_tokens: sum(&["vllm:prompt_tokens_total"]),
            generation_tokens: sum(&["vllm:generation_tokens_total"]),
        }
    }

    /// One CSV line in [`CSV_HEADER`]'s order: `t_ms` with µs decimals from
    /// the integer clock, values in Rust's shortest round-trip form, an
    /// empty cell for a metric the server lacks.
    pub fn write_csv_row(&self, w: &mut impl Write) -> io::Result<()> {
        write!(w, "{}.{:03}", self.t_us / 1000, self.t_us % 1000)?;
        for v in [
            self.num_requests_running,
            self.num_requests_waiting,
            self.kv_cache_usage_perc,
            self.prefix_cache_queries,
            self.prefix_cache_hits,
            self.num_preemptions,
            self.prompt_tokens,
            self.generation_tokens,
        ] {
            match v {
                Some(x) => write!(w, ",{x}")?,
                None => write!(w, ",")?,
            }
        }
        writeln!(w)
    }
}

fn aggregate(samples: &[PromSample], name: &str, mean: bool) -> Option<f64> {
    let (n, total) = samples.iter().filter(|s| s.name == name).fold((0u32, 0.0), |(n, t), s| (n + 1, t + s.value));
    match n {
        0 => None,
        _ if mean => Some(total / f64::from(n)),
        _ => Some(total),
    }
}

/// How long one GET may take before it counts as failed: a `/metrics` body
/// is ~55 KB and answered in milliseconds (measured on the 2-core CPU
/// server, scripts/vllm-cpu-server/README.md); 10 s means it is stuck.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

fn http_client(base: &str) -> Result<reqwest::Client, ServerError> {
    reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| ServerError::Connect { url: base.to_string(), reason: error_chain(&e) })
}

fn url(base: &str, path: &str) -> String {
    format!("{}{path}", base.trim_end_matches('/'))
}

/// GETs `url`; the body of a 2xx answer, else why not.
async fn get_text(http: &reqwest::Client, url: &str) -> Result<String, ServerError> {
    let fail = |e: reqwest::Error| {
        if e.is_timeout() {
            ServerError::Timeout { url: url.to_string(), ms: REQUEST_TIMEOUT.as_millis() as u64 }
        } else {
            ServerError::Connect { url: url.to_string(), reason: error_chain(&e) }
        }
    };
    let resp = http.get(url).send().await.map_err(fail)?;
    let status = resp.status();
    let body = resp.text().await.map_err(fail)?;
    if !status.is_success() {
        // A short excerpt: an error page can be long.
        let body: String = body.chars().take(300).collect();
        return Err(ServerError::Http { url: url.to_string(), status: status.as_u16(), body });
    }
    Ok(body)
}

/// reqwest's message plus its causes ("error sending request" alone does not
/// say "connection refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

async fn get_samples(http: &reqwest::Client, url: &str) -> Result<Vec<PromSample>, ServerError> {
    let body = get_text(http, url).await?;
    prometheus::parse(&body).map_err(|source| ServerError::Metrics { url: url.to_string(), source })
}

/// Reads the server's release, served models and KV-cache configuration.
/// `base` is the server's root, e.g. `http://127.0.0.1:8000`.
pub async fn server_info(base: &str) -> Result<ServerInfo, ServerError> {
    let http = http_client(base)?;
    let protocol = |url: &str| {
        let url = url.to_string();
        move |reason| ServerError::Protocol { url, reason }
    };
    let u = url(base, "/version");
    let version = parse_version(&get_text(&http, &u).await?).map_err(protocol(&u))?;
    let u = url(base, "/v1/models");
    let models = parse_models(&get_text(&http, &u).await?).map_err(protocol(&u))?;
    let u = url(base, "/metrics");
    let cache = cache_config(&get_samples(&http, &u).await?).map_err(protocol(&u))?;
    Ok(ServerInfo { version, models, cache })
}

/// What a [`scrape_loop`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScrapeSummary {
    /// Samples handed to the sink.
    pub samples: u64,
    /// Scrapes that got no `/metrics` body (refused, timed out, non-2xx).
    pub failed: u64,
    /// Why the first failed one failed.
    pub first_error: Option<String>,
}

/// Scrapes `{base}/metrics` at once, then every `interval`, until `stop`
/// holds `true` (or its sender is dropped), then once more so the counters'
/// final values are recorded; each sample goes to `sink` stamped with
/// `clock_us()` (µs on the observe clock). A scrape that gets no answer is
/// counted in the summary and the loop goes on (the server may be busy or
/// restarting; the requests' own records say what failed); a body that is
/// not Prometheus text, or a sink error, ends the loop with the error. A
/// scrape slower than `interval` delays the next instead of bunching them.
pub async fn scrape_loop<C, S>(
    base: &str,
    interval: Duration,
    clock_us: C,
    mut stop: watch::Receiver<bool>,
    mut sink: S,
) -> Result<ScrapeSummary, ServerError>
where
    C: Fn() -> u64,
    S: FnMut(&MetricsSample) -> io::Result<()>,
{
    if interval.is_zero() {
        return Err(ServerError::ZeroInterval);
    }
    let http = http_client(base)?;
    let u = url(base, "/metrics");
    let mut summary = ScrapeSummary::default();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // The stop signal (a `true`, or a dropped sender) makes the scrape
        // that follows it the last one.
        let mut last = *stop.borrow_and_update();
        if !last {
            tokio::select! {
                biased;
                changed = stop.changed() => {
                    if changed.is_ok() && !*stop.borrow_and_update() {
                        continue;
                    }
                    last = true;
                }
                _ = tick.tick() => {}
            }
        }
        match get_samples(&http, &u).await {
            Ok(samples) => {
                sink(&MetricsSample::from_samples(clock_us(), &samples))?;
                summary.samples += 1;
            }
            Err(e @ ServerError::Metrics { .. }) => return Err(e),
            Err(e) => {
                summary.failed += 1;
                summary.first_error.get_or_insert_with(|| e.to_string());
            }
        }
        if last {
            return Ok(summary);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = include_str!("../../tests/data/observe/metrics-0.32.txt");
    const MODELS: &str = include_str!("../../tests/data/observe/models-0.32.json");

    #[test]
    fn captured_metrics_parse_and_give_the_cache_config() {
        let samples = prometheus::parse(METRICS).unwrap();
        let c = cache_config(&samples).unwrap().unwrap();
        // The server of scripts/vllm-cpu-server/start.sh: --block-size 32,
        // 1 GiB of KV = 8192 blocks = 262144 tokens, prefix caching on.
        assert_eq!(c.block_size, Some(32));
        assert_eq!(c.num_gpu_blocks, Some(8192));
        assert_eq!(c.kv_cache_size_tokens, Some(262_144));
        assert_eq!(c.enable_prefix_caching, Some(true));
        assert_eq!(c.cache_dtype.as_deref(), Some("auto"));
        assert!(c.labels.windows(2).all(|w| w[0] <= w[1]));
        assert!(c.labels.iter().any(|(k, v)| k == "num_cpu_blocks" && v == "None"));
    }

    #[test]
    fn captured_metrics_give_a_sample() {
        // Captured after smoke.py: 10 requests, 2620 prompt tokens of which
        // 1472 hit the prefix cache, 320 generated, none running.
        let s = MetricsSample::from_samples(1_234_567, &prometheus::parse(METRICS).unwrap());
        assert_eq!(
            s,
            MetricsSample {
                t_us: 1_234_567,
                num_requests_running: Some(0.0),
                num_requests_waiting: Some(0.0),
                kv_cache_usage_perc: Some(0.0),
                prefix_cache_queries: Some(2620.0),
                prefix_cache_hits: Some(1472.0),
                num_preemptions: Some(0.0),
                prompt_tokens: Some(2620.0),
                generation_tokens: Some(320.0),
            }
        );
        let mut row = Vec::new();
        s.write_csv_row(&mut row).unwrap();
        assert_eq!(String::from_utf8(row).unwrap(), "1234.567,0,0,0,2620,1472,0,2620,320\n");
        assert_eq!(CSV_HEADER.split(',').count(), 9);
    }

    #[test]
    fn engines_are_summed_older_names_are_read_and_missing_metrics_stay_empty() {
        let text = "vllm:num_requests_running{engine=\"0\"} 2\nvllm:num_requests_running{engine=\"1\"} 3\n\
                    vllm:gpu_cache_usage_perc{engine=\"0\"} 0.5\nvllm:gpu_cache_usage_perc{engine=\"1\"} 0.25\n\
                    vllm:gpu_prefix_cache_hits_total 7\n";
        let s = MetricsSample::from_samples(5, &prometheus::parse(text).unwrap());
        assert_eq!(s.num_requests_running, Some(5.0));
        assert_eq!(s.kv_cache_usage_perc, Some(0.375));
        assert_eq!(s.prefix_cache_hits, Some(7.0));
        assert_eq!(s.prefix_cache_queries, None);
        let mut row = Vec::new();
        s.write_csv_row(&mut row).unwrap();
        assert_eq!(String::from_utf8(row).unwrap(), "0.005,5,,0.375,,7,,,\n");
    }

    #[test]
    fn cache_config_is_none_without_the_metric_and_refuses_bad_labels() {
        assert_eq!(cache_config(&prometheus::parse("x 1\n").unwrap()), Ok(None));
        let bad = prometheus::parse("vllm:cache_config_info{block_size=\"x\"} 1\n").unwrap();
        assert_eq!(cache_config(&bad).unwrap_err(), "cache_config_info block_size=\"x\" is not a whole number");
        let bad = prometheus::parse("vllm:cache_config_info{enable_prefix_caching=\"yes\"} 1\n").unwrap();
        assert!(cache_config(&bad).unwrap_err().contains("not True/False"));
    }

    #[test]
    fn captured_models_and_version_parse() {
        let m = parse_models(MODELS).unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].id, "tiny");
        assert_eq!(m[0].max_model_len, Some(4096));
        assert_eq!(m[0].root.as_deref(), Some("/tmp/observe-server/tiny-model"));
        assert_eq!(parse_version("{\"version\":\"0.32.0\"}"), Ok("0.32.0".to_string()));
    }

    #[test]
    fn wrong_json_says_what_is_missing() {
        assert!(parse_version("{}").unwrap_err().contains("\"version\""));
        assert!(parse_version("<html>").unwrap_err().starts_with("not JSON"));
        assert!(parse_models("{\"data\":[]}").unwrap_err().contains("no model"));
        assert!(parse_models("{\"data\":[{\"x\":1}]}").unwrap_err().contains("data[0]: no string field \"id\""));
        assert!(
            parse_models("{\"data\":[{\"id\":\"m\",\"max_model_len\":-1}]}").unwrap_err().contains("max_model_len: -1")
        );
        assert_eq!(parse_models("{\"data\":[{\"id\":\"m\"}]}").unwrap()[0].max_model_len, None);
    }
}
