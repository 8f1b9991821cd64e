//! NVIDIA aiconfigurator's measured deployments
//! (`../shared/data/aiconfigurator-vllm-h100-h200/silicon_sample.csv`): one
//! row per benchmark run — a model served by vLLM on H100 or H200 SXM at a
//! TP degree, driven closed loop at a concurrency, and its measured mean
//! TTFT and TPOT. Only aggregated vLLM rows (`backend vllm`, `mode agg`) on
//! H100/H200 for a model in the catalog are replayed.
//!
//! Each row is replayed under the protocol that most probably produced it
//! (`../shared/data/protocols/README.md`, which reads both harnesses at a
//! commit; its §1 tells a row's protocol from `silicon_data_source`):
//!
//! - **A, InferenceX** (SemiAnalysis' `benchmark_serving.py`): ISL and OSL
//!   each drawn per request, uniform over the integers `[int(0.8·L), L]`
//!   (`--random-range-ratio 0.8`; drawn here from a seeded stream, not
//!   numpy's); distinct random prompts; `10·c` measured requests at most `c`
//!   in flight, all ready at once; before them (rows measured from
//!   2026-01-21, when the harness gained them) `2·c` warm-ups of the first
//!   prompt under the same cap, which the harness awaits all of
//!   (`asyncio.gather`) before the first measured request; greedy,
//!   `ignore_eos`. The server as the model's recipe ran it: the
//!   Llama-3.1-70B FP8 recipe (`benchmarks/70b_fp8_{h100,h200}_slurm.sh`)
//!   sets an FP8 KV cache, async scheduling, no prefix caching, 8,192
//!   batched tokens, `max-num-seqs = c`, `gpu-memory-utilization 0.9`
//!   and `max-model-len` 10,240 on H100 (ISL+OSL+20 for 1k/1k on H200,
//!   +200 otherwise); other recipes' flags are vLLM's defaults here.
//! - **B, aiconfigurator's gap analysis** (`genai_perf_runner`, Dynamo):
//!   fixed ISL plus the model's chat-template tokens (the chat endpoint),
//!   fixed OSL, `10·c` measured after `2·c` warm-ups; the engine as AIC's
//!   generator sets it: `max-num-batched-tokens = batch + ISL + 1500`,
//!   `max-model-len = ISL + OSL + 1500`, vLLM's defaults otherwise —
//!   including `gpu-memory-utilization` 0.9, not the 0.7 of AIC's
//!   `FREE_GPU_MEM_FRAC`, which the rows contradict: at 0.7 Qwen3-235B-A22B
//!   FP8 at TP 2 (110 GiB of weights a GPU) cannot start on 141 GB H200s,
//!   and Qwen3-32B at TP 2 with 64 prompts of 4,096 tokens (or 128 of
//!   1,024) would queue for KV, where the measured TTFTs (0.65-4.4 s)
//!   show no such queue; at 0.9 the replay's KV-bound rows are exactly the
//!   rows with measured TTFTs of 4-59 s. The TTFT includes Dynamo's
//!   front-end hop, for which no figure is published: not modelled.
//! - **C, a Dynamo job** (and rows no rule places): protocol unknown,
//!   replayed as B and reported apart.
//!
//! TPOT is scored as both harnesses compute it: per request (latency − TTFT)
//! / (output tokens − 1), a plain mean over the measured requests. A vLLM
//! release before 0.14 (`backend_version`) runs without async scheduling
//! unless its recipe turns it on; the scheduler is modelled as 0.15 (the
//! oldest release modelled; the behaviours later releases added are absent
//! from 0.10-0.12 too).

use std::path::Path;

use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::blis_trainval::Aggregate;
use super::common::{ConvertError, column, llm_request, read_csv, token_ids};
use crate::workload::types::{LlmCall, NodeKind, Request, RequestId};

/// The columns that say how an MoE model's experts and attention were laid
/// out over the GPUs.
const LAYOUT_COLUMNS: [&str; 3] = ["moe_tp_size", "moe_ep_size", "attention_dp_size"];

/// Measured requests per unit of concurrency: InferenceX's
/// `--num-prompts $((CONC * 10))` and genai-perf's `--request-count 10c`
/// (protocols README §2, §3).
const PROMPTS_PER_USER: u64 = 10;

/// Warm-up requests per unit of concurrency: InferenceX's
/// `--num-warmups $((2 * CONC))` and genai-perf's `--warmup-request-count 2c`.
const WARMUPS_PER_USER: u64 = 2;

/// InferenceX's `--random-range-ratio` (`RANDOM_RANGE_RATIO: 0.8` in
/// `.github/workflows/benchmark-tmpl.yml`): lengths from ⌊0.8·L⌋ to L,
/// as the exact fraction 4/5.
const RANGE_RATIO: (u64, u64) = (4, 5);

/// The day InferenceX's harness gained warm-ups (`d053ae24`, 2026-01-21):
/// rows measured before it ran none.
const WARMUPS_SINCE: &str = "2026-01-21";

/// AIC's generator rules (`generator/rule_plugin/vllm.rule`): the slack it
/// adds to `max-num-batched-tokens` and `max-model-len`.
const AIC_TOKEN_SLACK: u64 = 1500;

/// How a row was most probably measured (protocols README §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Protocol {
    /// A: SemiAnalysis' InferenceX harness.
    InferenceX,
    /// B: aiconfigurator's own gap-analysis pipeline (genai-perf over Dynamo).
    AicGapAnalysis,
    /// C: an internal Dynamo job: protocol unknown (replayed as B).
    DynamoJob,
    /// No rule places the row: protocol unknown (replayed as B).
    Unrecognized,
}

impl Protocol {
    /// The class letter of the protocols README (C for both unknowns).
    pub fn class(self) -> &'static str {
        match self {
            Protocol::InferenceX => "A",
            Protocol::AicGapAnalysis => "B",
            Protocol::DynamoJob => "C",
            Protocol::Unrecognized => "C?",
        }
    }

    /// Whether the protocol is known (A or B): only those rows count toward
    /// the TPOT target.
    pub fn known(self) -> bool {
        matches!(self, Protocol::InferenceX | Protocol::AicGapAnalysis)
    }
}

/// The protocol of a row from its `silicon_data_source`, by the rules of
/// the protocols README §1, in its order.
pub fn classify(source: &str) -> Protocol {
    let fields: Vec<&str> = source.split(';').map(str::trim).collect();
    const INFERENCEX_FILES: [&str; 3] =
        ["source_file=2026-03-25.csv", "source_file=2026-04-06.csv", "source_file=kimi-k2.5-gap-analysis.csv"];
    if source.trim_start().starts_with("db-dump/") || fields.iter().any(|f| INFERENCEX_FILES.contains(f)) {
        Protocol::InferenceX
    } else if source.contains("aic-auto-gap-analysis") {
        if source.contains("dynamo_version=") { Protocol::DynamoJob } else { Protocol::AicGapAnalysis }
    } else {
        Protocol::Unrecognized
    }
}

/// The `measured=` date of a row (`2025-10-29`), if it has one.
fn measured_date(source: &str) -> Option<&str> {
    source.split(';').find_map(|f| f.trim().strip_prefix("measured=")).map(|d| d.get(..10).unwrap_or(d))
}

/// Whether an InferenceX row ran warm-ups: measured on or after
/// [`WARMUPS_SINCE`]; a row without a date is taken as the harness as the
/// protocols README read it (with them).
fn inferencex_warmups(source: &str) -> bool {
    measured_date(source).is_none_or(|d| d >= WARMUPS_SINCE)
}

/// Tokens a model's chat template puts before and after a single user
/// message with the generation prompt (class B's chat endpoint), counted by
/// hand from each checkpoint's `tokenizer_config.json` template (no
/// tokenizer runs here; the special tokens and role names are one token
/// each in both vocabularies):
/// - Qwen3: `<|im_start|>user\n` (3) … `<|im_end|>\n<|im_start|>assistant\n`
///   (5); no default system prompt, thinking left on (no `<think>` block).
/// - Llama-3.1 Instruct: `<|begin_of_text|>`, the default system header
///   (`<|start_header_id|>system<|end_header_id|>\n\n` 4, "Cutting
///   Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" 19 by the
///   Llama 3 pre-tokenizer — digits in groups of up to three, "Cutting" as
///   one token — and `<|eot_id|>`), then `<|start_header_id|>user
///   <|end_header_id|>\n\n` (4): 29 before; `<|eot_id|><|start_header_id|>
///   assistant<|end_header_id|>\n\n` (5) after. ±1 on whether "Cutting" is
///   one token.
fn chat_template_tokens(model_path: &str) -> Option<(u64, u64)> {
    let name = model_path.rsplit('/').next().unwrap_or(model_path);
    if name.starts_with("Qwen3-") {
        Some((3, 5))
    } else if name.starts_with("Llama-3.1-") && name.contains("Instruct") {
        Some((29, 5))
    } else {
        None
    }
}

/// One measured deployment, ready to replay.
#[derive(Debug, Clone)]
pub struct SiliconRun {
    /// The deployment, as a scenario file.
    pub scenario_yaml: String,
    /// Warm-up requests, sent first at most `concurrency` at a time; the
    /// harness waits for every one before it sends a measured request.
    pub warmups: Vec<Request>,
    /// The measured requests, all ready together (once the warm-ups are
    /// done).
    pub workload: Vec<Request>,
    /// Requests in flight at most.
    pub concurrency: u32,
    /// Measured mean TTFT and TPOT (over the measured requests).
    pub aggregates: Vec<Aggregate>,
    /// How the row was measured.
    pub protocol: Protocol,
    /// The longest measured request, prompt plus output tokens: with
    /// `concurrency` of them the KV cache must hold this many each.
    pub max_request_tokens: u64,
    /// What the replay assumed beyond the row, one line each.
    pub notes: Vec<String>,
}

/// One row, as read.
struct Row {
    /// Its line in the file.
    line: usize,
    model: &'static str,
    model_path: String,
    gpu: &'static str,
    /// `fp8`, `fp8_block` or none (16-bit).
    fp8: Option<&'static str>,
    tp: u64,
    isl: u64,
    osl: u64,
    concurrency: u64,
    /// Per-rank batch size (AIC's `max_batch_size`), if given.
    batch_size: Option<u64>,
    ttft_ms: f64,
    tpot_ms: f64,
    /// `backend_version`, if given.
    version: Option<String>,
    source: String,
    protocol: Protocol,
}

fn rows(data: &Path) -> Result<Vec<Row>, ConvertError> {
    let path = data.join("silicon_sample.csv");
    let (headers, rows) = read_csv(&path)?;
    let file = path.display().to_string();
    // Row `i` is on line i + 2 (after the header).
    let err = |i: usize, field: &str, reason: String| ConvertError {
        file: file.clone(),
        line: i as u64 + 2,
        field: field.to_owned(),
        reason,
    };
    let col = |name: &str| column(&path, &headers, name);
    let c = [
        "silicon_data_source",
        "backend",
        "model_path",
        "system",
        "precision",
        "mode",
        "isl",
        "osl",
        "tp_size",
        "batch_size",
        "silicon_ttft_ms",
        "silicon_tpot_ms",
    ]
    .map(col);
    let [c_source, c_backend, c_model, c_system, c_precision, c_mode, c_isl, c_osl, c_tp, c_batch, c_ttft, c_tpot] = c;
    let (c_source, c_backend, c_model, c_system, c_precision, c_mode) =
        (c_source?, c_backend?, c_model?, c_system?, c_precision?, c_mode?);
    let (c_isl, c_osl, c_tp, c_batch, c_ttft, c_tpot) = (c_isl?, c_osl?, c_tp?, c_batch?, c_ttft?, c_tpot?);
    // Optional: a row without a release runs as vLLM's current defaults; a
    // file without the MoE layout columns has dense rows only.
    let c_version = col("backend_version").ok();
    let c_layout = LAYOUT_COLUMNS.map(|name| col(name).ok());
    let mut out = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let gpu = match r[c_system].as_str() {
            "h100_sxm" => "H100",
            "h200_sxm" => "H200",
            "b200_sxm" => "B200",
            _ => continue,
        };
        if r[c_backend] != "vllm" || r[c_mode] != "agg" {
            continue;
        }
        let Some((model, config)) = crate::arch::catalog::model_config(&r[c_model]) else { continue };
        let tp =
            r[c_tp].trim().parse::<u64>().map_err(|_| err(i, "tp_size", format!("`{}` is not a count", r[c_tp])))?;
        // An MoE model's experts sharded like its attention (moe_tp = tp, no
        // expert or attention data parallelism) is what a replay prices.
        let arch = crate::arch::ModelArch::from_config_json(model, config).ok();
        let moe = arch.as_ref().is_some_and(|m| m.moe.is_some());
        // FP4 weights are priced only where the checkpoint has them (gpt-oss's
        // MXFP4 experts); an NVFP4 quantization of a 16-bit model is not
        // modelled (B200's Llama-3.1-70B fp4 rows).
        let mxfp4 = arch
            .as_ref()
            .and_then(|m| m.moe.as_ref())
            .is_some_and(|m| m.packed_experts == Some(crate::arch::PackedExperts::Mxfp4));
        if r[c_precision].contains("fp4") && !mxfp4 {
            continue;
        }
        let mut layout = [None; 3];
        for (slot, (c, field)) in layout.iter_mut().zip(c_layout.iter().zip(LAYOUT_COLUMNS)) {
            let Some(&c) = c.as_ref() else { continue };
            let cell = r[c].trim();
            if !cell.is_empty() {
                *slot = Some(cell.parse::<u64>().map_err(|_| err(i, field, format!("`{cell}` is not a count")))?);
            }
        }
        if moe
            && (layout[0].is_some_and(|t| t != tp)
                || layout[1].is_some_and(|e| e > 1)
                || layout[2].is_some_and(|a| a > 1))
        {
            continue;
        }
        let int = |c: usize, field: &str| {
            r[c].trim().parse::<u64>().map_err(|_| err(i, field, format!("`{}` is not a count", r[c])))
        };
        let num = |c: usize, field: &str| {
            r[c].trim().parse::<f64>().map_err(|_| err(i, field, format!("`{}` is not a number", r[c])))
        };
        // The benchmark's concurrency; rows without it give the batch size
        // (per rank, and these rows have no attention DP: the same number).
        let batch_size = (!r[c_batch].trim().is_empty()).then(|| int(c_batch, "batch_size")).transpose()?;
        let concurrency = match r[c_source]
            .split(';')
            .find_map(|p| p.trim().strip_prefix("silicon_concurrency="))
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            Some(c) => c,
            None => int(c_batch, "batch_size")?,
        };
        let version = c_version.map(|c| r[c].trim().to_owned()).filter(|v| !v.is_empty());
        out.push(Row {
            line: i + 2,
            model,
            model_path: r[c_model].clone(),
            gpu,
            fp8: if crate::arch::catalog::block_fp8_checkpoint(&r[c_model]) {
                Some("fp8_block")
            } else if r[c_precision].starts_with("fp8") || r[c_model].to_ascii_uppercase().contains("FP8") {
                Some("fp8")
            } else {
                None
            },
            tp,
            isl: int(c_isl, "isl")?,
            osl: int(c_osl, "osl")?,
            concurrency,
            batch_size,
            ttft_ms: num(c_ttft, "silicon_ttft_ms")?,
            tpot_ms: num(c_tpot, "silicon_tpot_ms")?,
            version,
            protocol: classify(&r[c_source]),
            source: r[c_source].clone(),
        });
    }
    Ok(out)
}

/// `major.minor` of a vLLM release (`0.12.0` → (0, 12)).
fn release(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.trim().split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => Some((major, minor)),
        _ => None,
    }
}

/// Whether vLLM release `version` (`0.12.0`) predates async scheduling by
/// default: it arrived in 0.14.0 (vllm-project/vllm#27614; up to then
/// `SchedulerConfig.async_scheduling` defaults to False).
fn before_async_default(version: &str) -> bool {
    release(version).is_some_and(|r| r < (0, 14))
}

/// The release a row ran: its `backend_version`, else (the Llama-3.1-70B
/// InferenceX rows, which name none) the image their workflow ran —
/// `vllm/vllm-openai:v0.10.2` in InferenceX's `.github/workflows/70b-tmpl.yml`
/// (@07e6e8a2, the template of the October 2025 70B sweeps; the model there
/// is `nvidia/Llama-3.3-70B-Instruct-FP8`, Llama-3.1-70B's architecture).
fn engine_release(r: &Row) -> Option<String> {
    r.version
        .clone()
        .or_else(|| (r.protocol == Protocol::InferenceX && r.model == "Llama-3.1-70B").then(|| "0.10.2".to_owned()))
}

/// Whose measured FP8 GEMMs price the row: vLLM 0.14's (H100 only) for a
/// row that records a release before 0.20 (nearer 0.14 than 0.24, the two
/// releases measured), else 0.24's. H200 has no 0.14 table: its rows stay on
/// 0.24's. A row that records no release (the Llama-3.1-70B InferenceX
/// rows, whose release is only inferred, [`engine_release`]) stays on
/// 0.24's: the inference decides its scheduler defaults, not which of two
/// measured tables is right, and the rows themselves side with 0.24's —
/// the 43 H100 rows' TPOT bias is −6.9 % on it and +12.7 % on 0.14's, while
/// the 58 H200 rows of the same recipe (0.24's table only) are −2.4 %
/// (`sweeps/calibration-silicon.yaml`, with `fp8_gemm_release: "0.14"`
/// forced for the comparison).
fn fp8_gemm_release(r: &Row) -> Option<&'static str> {
    let old = r.version.as_deref().and_then(release).is_some_and(|v| v < (0, 20));
    (r.fp8.is_some() && old && r.gpu == "H100").then_some("0.14")
}

fn name(r: &Row) -> String {
    let dtype = r.fp8.unwrap_or("bf16");
    format!("{}-{}-tp{}-{dtype}-{}x{}-c{}-line{}", r.gpu, r.model, r.tp, r.isl, r.osl, r.concurrency, r.line)
}

/// The replayable rows, by name (`GPU-model-tpN-dtype-ISLxOSL-cC-lineL`), in file order.
pub fn list(data: &Path) -> Result<Vec<String>, ConvertError> {
    Ok(rows(data)?.iter().map(name).collect())
}

/// The lengths of one InferenceX request: uniform over the integers
/// `[⌊0.8·L⌋, L]`, ISL then OSL, from `rng`.
fn ranged(rng: &mut Xoshiro256PlusPlus, isl: u64, osl: u64) -> (u64, u64) {
    let low = |l: u64| (l * RANGE_RATIO.0 / RANGE_RATIO.1).max(1);
    let i = rng.random_range(low(isl)..=isl);
    let o = rng.random_range(low(osl)..=osl);
    (i, o)
}

/// How many KV blocks a scenario (YAML text, display name) resolves to: the
/// caller's, since resolving a scenario is a layer above the importers.
pub type KvBlocks = fn(&str, &str) -> Result<u32, String>;

/// Reads row `name`; `kv_blocks` sizes the replayed deployment's KV cache.
pub fn load(data: &Path, wanted: &str, kv_blocks: KvBlocks) -> Result<SiliconRun, ConvertError> {
    let csv = data.join("silicon_sample.csv").display().to_string();
    let all = rows(data)?;
    let Some(r) = all.iter().find(|r| name(r) == wanted) else {
        return Err(ConvertError {
            file: csv,
            line: 0,
            field: "id".to_owned(),
            reason: format!("no replayable row `{wanted}`"),
        });
    };
    let at = |field: &str, reason: String| ConvertError {
        file: csv.clone(),
        line: r.line as u64,
        field: field.to_owned(),
        reason,
    };
    if r.isl > 1 << 20 || r.osl > 1 << 20 {
        return Err(at("isl", format!("{} is beyond what a replay holds", r.isl.max(r.osl))));
    }
    if r.isl == 0 || r.osl == 0 {
        return Err(at(if r.isl == 0 { "isl" } else { "osl" }, "must be at least 1 token".to_owned()));
    }
    if r.concurrency == 0 || r.concurrency > 1 << 16 {
        return Err(at("silicon_concurrency", format!("{} is beyond what a replay holds", r.concurrency)));
    }
    // Every prompt is held in memory: at most 2^30 prompt tokens in all.
    if (PROMPTS_PER_USER + WARMUPS_PER_USER) * r.concurrency * (r.isl + 64) > 1 << 30 {
        return Err(at("isl", format!("{} is beyond what a replay holds", r.isl)));
    }
    let c = r.concurrency;
    let mut notes = Vec::new();
    let release = engine_release(r);
    let sync = release.as_deref().is_some_and(before_async_default);
    let mut engine: Vec<String> = vec!["vllm_version: 0.15.0".to_owned()];
    let mut warmups = Vec::new();
    let workload: Vec<Request>;
    let request =
        |k: u64, input: Vec<u32>, output: u64| llm_request(RequestId::Int(k), 0.0, input, output as u32, None);
    match r.protocol {
        Protocol::InferenceX => {
            let recipe_70b = r.model == "Llama-3.1-70B";
            if recipe_70b {
                let max_model_len = match (r.gpu, r.isl, r.osl) {
                    ("H100", ..) => 10_240,
                    (_, 1024, 1024) => r.isl + r.osl + 20,
                    _ => r.isl + r.osl + 200,
                };
                engine.extend([
                    format!("max_num_seqs: {c}"),
                    "max_num_batched_tokens: 8192".to_owned(),
                    format!("max_model_len: {max_model_len}"),
                    "gpu_memory_utilization: 0.9".to_owned(),
                    "enable_prefix_caching: false".to_owned(),
                    "async_scheduling: true".to_owned(),
                ]);
                notes.push(
                    "InferenceX 70B FP8 recipe: FP8 KV cache (its capacity; attention priced on 16-bit KV kernels), \
                     async scheduling, no prefix caching, 8192 batched tokens, max-num-seqs = c"
                        .to_owned(),
                );
            } else {
                notes.push("InferenceX: this model's recipe flags not read; vLLM defaults".to_owned());
                if sync {
                    engine.push("async_scheduling: false".to_owned());
                }
            }
            // One stream per deployment and load (the name without its
            // line): the same row replays the same lengths, and so does the
            // same benchmark measured again.
            let key = wanted.rsplit_once("-line").map_or(wanted, |(k, _)| k);
            let seed =
                key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
            let lengths: Vec<(u64, u64)> = (0..PROMPTS_PER_USER * c).map(|_| ranged(&mut rng, r.isl, r.osl)).collect();
            let prompt = |k: u64, len: u64| token_ids(5_000_000 + k, len as usize).collect::<Vec<u32>>();
            if inferencex_warmups(&r.source) {
                // Every warm-up is the first measured request again.
                let (isl, osl) = lengths[0];
                warmups = (0..WARMUPS_PER_USER * c).map(|w| request(w, prompt(0, isl), osl)).collect();
            } else {
                notes.push(format!("measured before {WARMUPS_SINCE}: no warm-ups"));
            }
            let first = warmups.len() as u64;
            workload = lengths
                .iter()
                .enumerate()
                .map(|(k, &(i, o))| request(first + k as u64, prompt(k as u64, i), o))
                .collect();
        }
        Protocol::AicGapAnalysis | Protocol::DynamoJob | Protocol::Unrecognized => {
            let Some((before, after)) = chat_template_tokens(&r.model_path) else {
                return Err(at("model_path", format!("no chat-template token count known for `{}`", r.model_path)));
            };
            let batch = r.batch_size.unwrap_or(c);
            if batch > 1 << 16 {
                return Err(at("batch_size", format!("{batch} is beyond what a replay holds")));
            }
            engine.extend([
                format!("max_num_batched_tokens: {}", batch + r.isl + AIC_TOKEN_SLACK),
                format!("max_model_len: {}", r.isl + before + after + r.osl + AIC_TOKEN_SLACK),
            ]);
            if sync {
                engine.push("async_scheduling: false".to_owned());
            }
            notes.push(format!(
                "AIC pipeline: ISL + {} chat-template tokens, gpu-memory-utilization 0.9 (not AIC's 0.7, which the rows contradict); Dynamo front-end hop not modelled",
                before + after
            ));
            // The template's head is the same tokens in every prompt (a
            // shared prefix the cache can hold); its tail follows each
            // prompt's own random tokens.
            let head: Vec<u32> = token_ids(4_999_999, before as usize).collect();
            let tail: Vec<u32> = token_ids(4_999_998, after as usize).collect();
            let prompt = |k: u64| {
                let mut ids = head.clone();
                ids.extend(token_ids(5_000_000 + k, r.isl as usize));
                ids.extend(&tail);
                ids
            };
            let n_warm = WARMUPS_PER_USER * c;
            // genai-perf draws every request, warm-up or not, from its own
            // dataset entry (`--num-dataset-entries 12c`).
            warmups = (0..n_warm).map(|w| request(w, prompt(PROMPTS_PER_USER * c + w), r.osl)).collect();
            workload = (0..PROMPTS_PER_USER * c).map(|k| request(n_warm + k, prompt(k), r.osl)).collect();
        }
    }
    let fp8_release = fp8_gemm_release(r);
    if let Some(rel) = fp8_release {
        notes.push(format!("FP8 GEMMs of vLLM {rel} (the row's release: {})", release.as_deref().unwrap_or("?")));
    }
    let mut scenario_yaml = format!(
        "name: {wanted}\nmodel: {}\nhardware: {}\ntp: {}{}\n# Random tokens route evenly over an MoE model's experts.\nmoe_routing: balanced\n{}engine:\n",
        r.model,
        r.gpu,
        r.tp,
        r.fp8.map(|d| format!("\ndtype: {d}")).unwrap_or_default(),
        fp8_release.map(|rel| format!("fp8_gemm_release: \"{rel}\"\n")).unwrap_or_default(),
    );
    for line in &engine {
        scenario_yaml.push_str(&format!("  {line}\n"));
    }
    let max_request_tokens = workload
        .iter()
        .filter_map(call)
        .map(|l| u64::from(l.input_tokens) + u64::from(l.output_tokens))
        .max()
        .unwrap_or(0);
    if r.protocol == Protocol::InferenceX && r.model == "Llama-3.1-70B" {
        // `kv-cache-dtype: fp8` holds twice the tokens, but the kernel
        // tables price attention over a 16-bit KV cache only. Where the
        // 16-bit cache already holds every concurrent request the capacity
        // never binds and is left as computed; where it does not, the FP8
        // cache's block count is given.
        let blocks = |yaml: &str| probe_blocks(kv_blocks, yaml, wanted).map_err(|reason| at("kv_cache_dtype", reason));
        let need = c * max_request_tokens.div_ceil(BLOCK_SIZE) + 1;
        if u64::from(blocks(&scenario_yaml)?) < need {
            let fp8 = blocks(&format!("{scenario_yaml}  kv_cache_dtype: fp8\n"))?;
            let given = format!("{scenario_yaml}  num_gpu_blocks: {fp8}\n");
            // A count more than the GPU's memory holds at 16 bits is refused
            // as a typo would be (B200 TP1: 37,443 FP8 blocks, 36,671 at
            // most): the 16-bit count stays, noted.
            if blocks(&given).is_ok() {
                scenario_yaml = given;
                notes.push(format!("KV cache: {fp8} blocks, as FP8 KV sizes it"));
            } else {
                notes.push(format!(
                    "KV cache: 16-bit count kept (FP8 KV's {fp8} blocks exceed this GPU's memory at 16 bits)"
                ));
            }
        }
    }
    let aggregate =
        |metric: &str, actual_ms: f64| Aggregate { stage: -1, metric: metric.to_owned(), actual_ms, blis_ms: None };
    Ok(SiliconRun {
        scenario_yaml,
        warmups,
        workload,
        concurrency: c as u32,
        aggregates: vec![aggregate("ttft_mean", r.ttft_ms), aggregate("tpot_mean", r.tpot_ms)],
        protocol: r.protocol,
        max_request_tokens,
        notes,
    })
}

/// The one llm call of a replayed request.
fn call(q: &Request) -> Option<&LlmCall> {
    q.sub_requests.iter().find_map(|s| match &s.kind {
        NodeKind::Llm(l) => Some(l),
        _ => None,
    })
}

/// vLLM's KV block size (`--block-size` default), which these replays keep.
const BLOCK_SIZE: u64 = 16;

/// KV blocks of the deployment `scenario_yaml` (priced by the roofline, which
/// takes any KV dtype: the count does not depend on the latency model).
fn probe_blocks(kv_blocks: KvBlocks, scenario_yaml: &str, name: &str) -> Result<u32, String> {
    let probe = format!("{scenario_yaml}latency_model: roofline\n").replace("fp8_gemm_release: \"0.14\"\n", "");
    kv_blocks(&probe, name)
}

/// Whether `concurrency` requests of `request_tokens` (prompt + output)
/// each cannot all hold their KV at once in `num_gpu_blocks` blocks of
/// `block_size` (one of them vLLM's null block): a closed loop at that
/// concurrency then queues for KV, and its TTFT measures the queue.
pub fn kv_bound(concurrency: u64, request_tokens: u64, num_gpu_blocks: u32, block_size: u32) -> bool {
    let per_request = request_tokens.div_ceil(u64::from(block_size.max(1)));
    concurrency * per_request > u64::from(num_gpu_blocks.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_before_0_14_ran_without_async_scheduling() {
        assert!(before_async_default("0.12.0"));
        assert!(before_async_default("0.11.2"));
        assert!(!before_async_default("0.14.0"));
        assert!(!before_async_default("0.19.0"));
        // Unknown: vLLM's current default.
        assert!(!before_async_default(""));
        assert!(!before_async_default("main"));
    }

    #[test]
    fn rows_are_classified_by_their_source_string() {
        // Strings as silicon_sample.csv has them (protocols README §1).
        let a = [
            "db-dump/2026-04-27; config_id=606; silicon_concurrency=64; measured=2026-03-01T00:00:00.000Z; workflow_run_id=305; vllm/vllm-openai:v0.16.0",
            "source_file=2026-04-06.csv; model=Llama-3.1-70B; silicon_concurrency=16; measured=2025-10-29T00:00:00.000Z; wip=False",
            "source_file=2026-03-25.csv; model=MiniMax-M2.5; silicon_concurrency=32; measured=2026-03-27T07:59:49Z; wip=False; image=vllm/vllm-openai:v0.18.0",
            "source_file=kimi-k2.5-gap-analysis.csv; silicon_concurrency=64",
        ];
        for s in a {
            assert_eq!(classify(s), Protocol::InferenceX, "{s}");
        }
        let b = "source_file=/Users/harrli/projects/aic-auto-gap-analysis/data/h100_sxm/vllm/0.12.0/Qwen_Qwen3-32B.csv; silicon_concurrency=128";
        assert_eq!(classify(b), Protocol::AicGapAnalysis);
        let c = "source_file=/Users/harrli/projects/aic-auto-gap-analysis/data/h100_sxm/vllm/0.12.0/qwen3_32b.csv; gtl_job_id=23364591; gtl_task_id=102487544; measured=2026-01-23; image=nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.8.0; dynamo_version=0.8.0";
        assert_eq!(classify(c), Protocol::DynamoJob);
        assert_eq!(classify("source_file=x.csv"), Protocol::Unrecognized);
        // A file merely named like an InferenceX dump elsewhere in the path is not one.
        assert_eq!(classify("source_file=old/2026-04-06.csv.bak"), Protocol::Unrecognized);
        assert!(Protocol::InferenceX.known() && Protocol::AicGapAnalysis.known());
        assert!(!Protocol::DynamoJob.known() && !Protocol::Unrecognized.known());
    }

    #[test]
    fn inferencex_warmups_start_on_2026_01_21() {
        assert!(!inferencex_warmups("source_file=2026-04-06.csv; measured=2025-10-29T00:00:00.000Z"));
        assert!(!inferencex_warmups("source_file=2026-04-06.csv; measured=2026-01-20"));
        assert!(inferencex_warmups("source_file=2026-04-06.csv; measured=2026-01-21T08:00:00Z"));
        assert!(inferencex_warmups("source_file=kimi-k2.5-gap-analysis.csv; silicon_concurrency=64"));
    }

    #[test]
    fn lengths_are_drawn_within_the_range_and_cover_it() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        let draws: Vec<(u64, u64)> = (0..20_000).map(|_| ranged(&mut rng, 1024, 8192)).collect();
        // int(0.8 · 1024) = 819, int(0.8 · 8192) = 6553.
        assert!(draws.iter().all(|&(i, o)| (819..=1024).contains(&i) && (6553..=8192).contains(&o)));
        assert!(draws.iter().any(|&(i, _)| i == 819) && draws.iter().any(|&(i, _)| i == 1024));
        let mean = draws.iter().map(|d| d.0 as f64).sum::<f64>() / draws.len() as f64;
        assert!((mean - (819.0 + 1024.0) / 2.0).abs() < 3.0, "{mean}");
        // Seeded: the same stream gives the same lengths.
        let mut again = Xoshiro256PlusPlus::seed_from_u64(7);
        assert_eq!(ranged(&mut again, 1024, 8192), draws[0]);
        // A length of 1 stays 1.
        assert_eq!(ranged(&mut again, 1, 1), (1, 1));
    }

    #[test]
    fn kv_bound_compares_blocks_for_every_request_with_the_cache() {
        // 128 requests of 4096 + 1024 + 8 tokens: 321 blocks of 16 each.
        assert!(kv_bound(128, 5128, 128 * 321, 16));
        assert!(!kv_bound(128, 5128, 128 * 321 + 1, 16));
        assert!(!kv_bound(1, 16, 2, 16));
    }

    #[test]
    fn the_chat_templates_add_their_tokens() {
        assert_eq!(chat_template_tokens("Qwen/Qwen3-32B"), Some((3, 5)));
        assert_eq!(chat_template_tokens("Qwen/Qwen3-235B-A22B-FP8"), Some((3, 5)));
        assert_eq!(chat_template_tokens("nvidia/Llama-3.1-8B-Instruct-FP8"), Some((29, 5)));
        assert_eq!(chat_template_tokens("meta-llama/Llama-3.1-70B"), None);
    }
}
