//! `blis-sweep observe`: send a workload to a real vLLM server and record
//! what it did as result JSONL (per-token latencies) and, with
//! `--trace-output`, a TraceV2 pair (`mode: real`) — the baseline
//! `calibrate` and `fit` read.
//!
//! The workload is opened as `run` opens it (a workload JSONL, `--input
//! FORMAT:PATH`, a TraceV2 pair, a generator spec) and read twice: a first
//! pass validates every row, so a bad file is refused before anything is
//! sent (with `--api chat`, a call with token ids too); the second
//! streams it to the driver (`crate::observe::driver`). The server is asked
//! for its model first, so an unreachable server or a wrong name is one
//! clear error, not a file of failed requests. Outputs are written under
//! temporary names and renamed once the run is done. The tokio runtime is
//! made here: nothing below the CLI owns threads.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::atomic::{self, Named};
use super::client_args::ClientArgs;
use super::run::{Input, trace_paths, validate};
use super::workload_args::{Source, WorkloadArgs, trace_client};
use crate::observe::client::{CallError, Client};
use crate::observe::driver::{self, Api, CHAT_REFUSES_IDS, DriveError, DriverConfig};
use crate::observe::server::{CSV_HEADER, scrape_loop, server_info};
use crate::output::{JsonlWriter, ObservedServer, TraceV2Writer};
use crate::sim::Tee;
use crate::workload::NodeKind;
use crate::workload::import::common::ImportOptions;

/// A call is given up after this long without `--timeout`: ten minutes
/// bounds a hung server, far beyond a long call on the reference CPU server
/// (seconds, `../shared/reference/vllm-cpu-server/README.md`).
const DEFAULT_TIMEOUT_S: f64 = 600.0;

/// vLLM's default `--block-size` (16 tokens on GPUs; the reference CPU
/// server is started with 32): the unit TraceV2's shared prefixes are found in.
const DEFAULT_BLOCK_SIZE: u32 = 16;

/// How often `--metrics-csv` scrapes by default, ms: BLIS's snapshot
/// refresh is 50 ms; ten samples a second follow the queues of the CPU
/// server (31 samples over 3 s of 6 concurrent requests, measured) at half
/// that load on its API process.
const DEFAULT_SCRAPE_INTERVAL_MS: u64 = 100;

/// How long the first /metrics scrape is waited for before the first send:
/// the idle CPU server answers in 5–28 ms (five `curl -w %{time_total}`
/// of its /metrics, measured 2026-12-02); two seconds covers a loaded server without delaying a run
/// against one whose /metrics is missing for long.
const FIRST_SCRAPE_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, clap::Args)]
pub(crate) struct ObserveArgs {
    /// The server's base URL, e.g. http://127.0.0.1:8000 (plain HTTP).
    #[arg(long, value_name = "URL")]
    server_url: String,
    /// The model name the server serves (its /v1/models lists it).
    #[arg(long, value_name = "NAME")]
    model: String,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Result JSONL of what the server did (written atomically).
    #[arg(short = 'o', long, value_name = "RESULTS.jsonl")]
    output: PathBuf,
    /// Also write it as a TraceV2 pair, PREFIX.yaml and PREFIX.csv (`mode: real`).
    #[arg(long, value_name = "PREFIX")]
    trace_output: Option<PathBuf>,
    /// Also scrape the server's Prometheus /metrics while observing and
    /// write the samples here (CSV: t_ms since the observation started,
    /// running, waiting, KV cache usage, prefix-cache queries and hits,
    /// preemptions, prompt and generation token counters).
    #[arg(long, value_name = "METRICS.csv")]
    metrics_csv: Option<PathBuf>,
    /// How often /metrics is scraped, ms (with --metrics-csv; default 100).
    #[arg(long, value_name = "MS", requires = "metrics_csv", value_parser = clap::value_parser!(u64).range(1..))]
    scrape_interval_ms: Option<u64>,
    /// The server's KV block size, tokens: TraceV2's shared prefixes are
    /// found in whole blocks. Default: the server's (its /metrics'
    /// cache_config_info), else 16, vLLM's.
    #[arg(long, value_name = "TOKENS")]
    block_size: Option<u32>,
    /// The served model's vocabulary size: a workload's token ids (drawn
    /// for another tokenizer, e.g. `generate`'s 32,000) are sent as
    /// `id mod N`, so equal prompts stay equal and shared prefixes shared.
    /// Without it ids are sent as they are (the server refuses one past its
    /// vocabulary with HTTP 400, recorded on the call).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    vocab_size: Option<u32>,
    #[command(flatten)]
    sending: ClientArgs,
    /// vLLM's `cache_salt` sent with every call, so the server's prefix
    /// cache shares blocks among this observation's calls only, as the
    /// simulator's empty cache does. Default: a fresh salt each run (recorded
    /// in the TraceV2 header); `none` sends none (the calls may hit what the
    /// server cached before, e.g. an earlier run of the same workload).
    #[arg(long, value_name = "SALT")]
    cache_salt: Option<String>,
    /// Send the first N requests but leave them out of the outputs.
    #[arg(long, value_name = "N", default_value_t = 0)]
    warmup: u64,
    /// Give up on a call this long after sending it (recorded as timed out).
    /// Default 600.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// The API the calls go to: completions (/v1/completions, each prompt
    /// as token ids) or chat (/v1/chat/completions, each prompt one user
    /// message of the call's exact length once the model's chat template
    /// wraps it; a workload with token ids is refused).
    #[arg(long, value_enum, default_value_t = ApiFlag::Completions)]
    api: ApiFlag,
    /// No summary on stderr.
    #[arg(long, short = 'q')]
    quiet: bool,
}

/// `--api`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ApiFlag {
    Completions,
    Chat,
}

impl ObserveArgs {
    fn config(&self) -> anyhow::Result<DriverConfig> {
        let api = match self.api {
            ApiFlag::Completions => Api::Completions,
            ApiFlag::Chat => Api::Chat,
        };
        Ok(DriverConfig { client: self.sending.client()?, warmup: self.warmup, vocab_size: self.vocab_size, api })
    }

    /// The salt to send, checked as vLLM checks it (`validate_cache_salt`,
    /// vllm/entrypoints/generate/base/protocol.py in 0.32), so a bad one is
    /// refused before anything is sent.
    fn cache_salt(&self) -> anyhow::Result<Option<String>> {
        match self.cache_salt.as_deref() {
            Some("none") => Ok(None),
            Some(salt) => {
                if salt.is_empty() || salt.chars().count() > 128 {
                    bail!("--cache-salt: must be 1 to 128 characters (vLLM's limit)");
                }
                if let Some(c) = salt.chars().find(|c| matches!(c, '@' | '/' | '\\' | '\0')) {
                    bail!("--cache-salt: `{}` is a character vLLM refuses in a salt", c.escape_default());
                }
                Ok(Some(salt.to_owned()))
            }
            None => {
                let nanos =
                    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
                Ok(Some(format!("blis-sweep-{nanos:x}")))
            }
        }
    }

    fn timeout(&self) -> anyhow::Result<Duration> {
        let t = self.timeout.unwrap_or(DEFAULT_TIMEOUT_S);
        match crate::workload::checked_seconds_to_us(t) {
            Ok(0) => bail!("--timeout: must be positive"),
            Ok(us) => Ok(Duration::from_micros(us)),
            Err(reason) => bail!("--timeout: {reason}"),
        }
    }
}

pub(crate) fn run(args: ObserveArgs) -> anyhow::Result<()> {
    check_paths(&args)?;
    let mut config = args.config()?;
    let timeout = args.timeout()?;
    let cache_salt = args.cache_salt()?;
    let rate_scale = args.sending.rate_scale()?;
    if args.block_size == Some(0) {
        bail!("--block-size: must be at least 1");
    }
    let (rows, input) = match args.workload.source()? {
        Source::File(path) => validate(path, rate_scale, None)?,
        Source::Generate(spec, seed) => {
            let input = Input::Generate(spec, seed);
            (input.count(rate_scale, None)?.0, input)
        }
        Source::Trace(format, path, data) => {
            // A real server is sent what the trace says: its adapters by
            // name, its priorities in the body.
            let options =
                ImportOptions { trace_data: data, adapters: true, priorities: true, ..args.workload.import.options()? };
            // A pool of sessions (a benchmark's cap) is sent as `run` simulates it.
            if let Some(client) = trace_client(format, &path, &options, args.sending.concurrency.is_some())? {
                config.client = client;
            }
            let input = Input::Import(format, path, options);
            let (n, _) = input.count(rate_scale, None)?;
            (n, input)
        }
    };
    if config.api == Api::Chat {
        // Refused before anything is sent, not call by call.
        for row in input.rows()? {
            let request = row?;
            let ids = |n: &crate::workload::SubRequest| matches!(&n.kind, NodeKind::Llm(c) if c.prompt_ids().is_some());
            if let Some(i) = request.sub_requests.iter().position(ids) {
                bail!(
                    "--api: chat: request {}: sub_requests[{i}] carries token ids: {CHAT_REFUSES_IDS}",
                    request.request_id
                );
            }
        }
    }
    if args.warmup > 0 && rows <= args.warmup {
        bail!("--warmup: {} requests of {rows} would leave nothing to record", args.warmup);
    }
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    let client = Client::new(&args.server_url, &args.model, timeout)
        .map_err(|e| anyhow::anyhow!("--server-url: {e}"))?
        .with_cache_salt(cache_salt.clone());
    // A server that answers but not with the model is the name's fault;
    // one that does not answer is the URL's.
    runtime.block_on(client.check_model()).map_err(|e| match e {
        CallError::Protocol(_) => anyhow::anyhow!("--model: {}: {e}", args.model),
        e => anyhow::anyhow!("--server-url: {}: {e}", args.server_url),
    })?;

    // What the server says of itself, for the TraceV2 header: its release,
    // the model's context and the KV cache it runs (its block size unless
    // --block-size says otherwise).
    let info = runtime.block_on(server_info(&args.server_url)).ok();
    let cache = info.as_ref().and_then(|i| i.cache.as_ref());
    let block_size = args.block_size.or(cache.and_then(|c| c.block_size)).unwrap_or(DEFAULT_BLOCK_SIZE);
    let mut fields = Vec::new();
    if let Some(i) = &info {
        fields.push(("version".to_owned(), i.version.clone()));
        if let Some(len) = i.model(&args.model).and_then(|m| m.max_model_len) {
            fields.push(("max_model_len".to_owned(), len.to_string()));
        }
    }
    if let Some(c) = cache {
        if let Some(n) = c.num_gpu_blocks {
            fields.push(("num_gpu_blocks".to_owned(), n.to_string()));
        }
        if let Some(on) = c.enable_prefix_caching {
            fields.push(("enable_prefix_caching".to_owned(), on.to_string()));
        }
    }
    if let Some(salt) = &cache_salt {
        fields.push(("cache_salt".to_owned(), salt.clone()));
    }

    let mut results = atomic::create(&args.output)?;
    let mut metrics_csv = args.metrics_csv.as_deref().map(atomic::create).transpose()?;
    // The scraper runs beside the requests, on its own clock started with theirs.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let first_scrape = Arc::new(tokio::sync::Notify::new());
    let scraper = metrics_csv.as_ref().map(|_| {
        let base = args.server_url.clone();
        let interval = Duration::from_millis(args.scrape_interval_ms.unwrap_or(DEFAULT_SCRAPE_INTERVAL_MS));
        let start = Instant::now();
        let first = first_scrape.clone();
        runtime.spawn(async move {
            let mut rows = Vec::new();
            let summary = scrape_loop(
                &base,
                interval,
                move || start.elapsed().as_micros() as u64,
                stopped,
                |s| {
                    s.write_csv_row(&mut rows)?;
                    first.notify_one();
                    Ok(())
                },
            )
            .await;
            (summary, rows)
        })
    });
    // The first scrape is the counters before anything is sent (a
    // request's prefix-cache queries reach /metrics after its first step,
    // as soon as ~10 ms on the CPU server): the CSV's first row is the
    // baseline its last row is read against. A server whose /metrics does
    // not answer within FIRST_SCRAPE_WAIT is not waited for (the failed
    // scrapes are counted and said).
    if scraper.is_some() {
        let _ = runtime.block_on(async { tokio::time::timeout(FIRST_SCRAPE_WAIT, first_scrape.notified()).await });
    }
    let results_name = args.output.display().to_string();
    let mut trace = match &args.trace_output {
        Some(prefix) => {
            let (h, d) = trace_paths(prefix);
            Some((atomic::create(&h)?, h.display().to_string(), atomic::create(&d)?, d.display().to_string()))
        }
        None => None,
    };
    let wall = Instant::now();
    let summary = {
        let mut writer = JsonlWriter::new(&mut results, results_name);
        let mut trace_writer = trace.as_mut().map(|(h, hn, d, dn)| {
            let server = ObservedServer { model: args.model.clone(), block_size, fields: fields.clone() };
            TraceV2Writer::observed(
                (h as &mut dyn std::io::Write, hn.clone()),
                (d as &mut dyn std::io::Write, dn.clone()),
                server,
            )
        });
        let requests = input.rows()?.map(|row| -> anyhow::Result<_> {
            let mut request = row?;
            // (Checked by the first pass.)
            request.scale_arrival(rate_scale).map_err(anyhow::Error::msg)?;
            Ok(request)
        });
        let mut sink = Tee(&mut writer, &mut trace_writer);
        runtime.block_on(driver::drive(Arc::new(client), config, requests, &mut sink)).map_err(|e| match e {
            DriveError::Source(e) => e,
            DriveError::Sink(e) => anyhow::Error::new(e),
        })?
    };
    let _ = stop.send(true);
    if let (Some(task), Some(file)) = (scraper, metrics_csv.as_mut()) {
        let (summary, rows) = runtime.block_on(task).context("the /metrics scraper stopped")?;
        let summary = summary.map_err(|e| anyhow::anyhow!("--metrics-csv: {e}"))?;
        let name = args.metrics_csv.as_deref().expect("given").display().to_string();
        file.write_all(CSV_HEADER.as_bytes())
            .and_then(|()| file.write_all(b"\n"))
            .and_then(|()| file.write_all(&rows))
            .with_context(|| name.clone())?;
        if summary.failed > 0 && !args.quiet {
            say!("{name}: {} of {} scrapes got no answer", summary.failed, summary.failed + summary.samples);
        }
    }
    let mut files = vec![results];
    files.extend(metrics_csv);
    if let Some((h, _, d, _)) = trace {
        files.extend([h, d]);
    }
    atomic::commit_all(files)?;
    if !args.quiet {
        let s = &summary;
        let warmup =
            if args.warmup > 0 { format!(" ({} warm-up requests left out)", args.warmup) } else { String::new() };
        say!(
            "{}: {} requests sent{warmup}; {} recorded: {} completed, {} failed ({} with usage not the workload's), {} timed out; \
             at most {} in flight; {:.2} s from the first recorded send to the last finish ({:.2} s wall)",
            args.server_url,
            s.sent,
            s.recorded,
            s.completed,
            s.failed,
            s.usage_mismatches,
            s.timed_out,
            s.max_in_flight,
            s.duration_us as f64 / 1e6,
            wall.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// Refuses outputs that are one file, or an input, before anything is sent.
fn check_paths(args: &ObserveArgs) -> anyhow::Result<()> {
    let trace = args.trace_output.as_deref().map(trace_paths);
    let mut outputs = vec![Named::given("-o", &args.output)];
    if let Some((header, data)) = &trace {
        outputs.push(Named::given("--trace-output", header));
        outputs.push(Named::given("--trace-output", data));
    }
    let given = args.workload.inputs()?;
    let inputs: Vec<Named<'_>> = given.iter().map(|(flag, path)| Named::given(flag, path)).collect();
    atomic::check_distinct(&outputs, &inputs)
}
