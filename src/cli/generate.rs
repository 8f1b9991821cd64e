//! `blis-sweep generate`: a synthetic workload as JSONL, from a spec file
//! (the same mapping a plan's `workload.generate` holds) or from flags. The
//! spec is read by [`Spec::load`], which `run` and `observe` share
//! (`--workload-spec`): one generator, whichever command streams it.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use super::atomic;
use crate::workload::Request;
use crate::workload::generate::{GenerateError, GenerateSpec, Generator};
use crate::workload::writer::write_workload_row;

#[derive(Debug, clap::Args)]
pub(crate) struct GenerateArgs {
    /// Spec file (YAML): preset, num_requests, rate, arrival, input, output,
    /// prefix, sessions, agentic — as a plan's `workload.generate`.
    #[arg(long, value_name = "SPEC.yaml")]
    spec: Option<PathBuf>,
    /// chatbot | summarization | contentgen | multidoc (BLIS's lengths).
    #[arg(long)]
    preset: Option<String>,
    /// Mean requests per second.
    #[arg(long)]
    rate: Option<f64>,
    /// Requests to generate.
    #[arg(long, value_name = "N")]
    num_requests: Option<u64>,
    /// Seed of every random stream.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output file (written atomically); default stdout.
    #[arg(short = 'o', long, value_name = "WORKLOAD.jsonl")]
    output: Option<PathBuf>,
}

/// A validated generator and where its spec came from, so that its errors
/// name the spec file and the key's line, or the flag.
#[derive(Debug)]
pub(crate) struct Spec {
    generator: Generator,
    /// The spec file's flag, path and text; `None`: from flags alone.
    file: Option<(&'static str, PathBuf, String)>,
}

impl Spec {
    /// The generator of the spec file at `spec` (given as `spec_flag`), with
    /// `--preset`, `--rate` and `--num-requests` over its keys; or of those
    /// flags alone (`--rate` and `--num-requests` needed, `--preset`
    /// chatbot by default).
    pub(crate) fn load(
        spec_flag: &'static str,
        spec: Option<&Path>,
        preset: Option<String>,
        rate: Option<f64>,
        num_requests: Option<u64>,
    ) -> anyhow::Result<Spec> {
        let (mut parsed, base, file) = match spec {
            Some(path) => {
                let text = std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
                let parsed: GenerateSpec = crate::yaml::parse_file(path, &text)?;
                let base = path.parent().unwrap_or(Path::new(".")).to_path_buf();
                (parsed, base, Some((spec_flag, path.to_path_buf(), text)))
            }
            None => {
                let (Some(rate), Some(num_requests)) = (rate, num_requests) else {
                    bail!("give {spec_flag} SPEC.yaml, or --rate and --num-requests (with --preset)");
                };
                let parsed = GenerateSpec {
                    preset: Some(preset.clone().unwrap_or_else(|| "chatbot".to_owned())),
                    num_requests,
                    rate,
                    arrival: None,
                    input: None,
                    output: None,
                    prefix: None,
                    sessions: None,
                    agentic: None,
                    vocab_size: None,
                };
                (parsed, PathBuf::from("."), None)
            }
        };
        if file.is_some() {
            if let Some(p) = preset {
                parsed.preset = Some(p);
            }
            if let Some(r) = rate {
                parsed.rate = r;
            }
            if let Some(n) = num_requests {
                parsed.num_requests = n;
            }
        }
        let generator = Generator::new(&parsed, &base).map_err(|e| locate(file.as_ref(), &e))?;
        Ok(Spec { generator, file })
    }

    /// Why the spec cannot make what was asked, named as its source says.
    pub(crate) fn error(&self, e: &GenerateError) -> anyhow::Error {
        locate(self.file.as_ref(), e)
    }

    /// The requests for `seed`, streamed, each error named (see
    /// [`Spec::error`]).
    pub(crate) fn requests(&self, seed: u64) -> impl Iterator<Item = anyhow::Result<Request>> + '_ {
        self.generator.requests(seed).map(|r| r.map_err(|e| self.error(&e)))
    }
}

/// `e` at the spec file's line of its key, or as the flag it came from.
fn locate(file: Option<&(&'static str, PathBuf, String)>, e: &GenerateError) -> anyhow::Error {
    match file {
        Some((_, path, text)) => anyhow::anyhow!("{}: {e}", crate::yaml::locate(path, text, &e.field)),
        None => anyhow::anyhow!("--{}: {}", e.field.replace('_', "-"), e.reason),
    }
}

pub(crate) fn run(args: GenerateArgs) -> anyhow::Result<()> {
    let output = match &args.output {
        Some(path) => atomic::Named::given("-o", path),
        None => atomic::Named::stdout("-o"),
    };
    let spec = args.spec.as_deref().map(|path| atomic::Named::given("--spec", path));
    atomic::check_distinct(&[output], spec.as_slice())?;
    let spec = Spec::load("--spec", args.spec.as_deref(), args.preset, args.rate, args.num_requests)?;
    let mut buf = Vec::with_capacity(1 << 16);
    let mut emit = |out: &mut dyn Write| -> anyhow::Result<()> {
        for request in spec.requests(args.seed) {
            buf.clear();
            write_workload_row(&mut buf, &request?);
            out.write_all(&buf)?;
        }
        Ok(out.flush()?)
    };
    match &args.output {
        Some(path) => {
            let mut file = atomic::create(path)?;
            emit(&mut file).with_context(|| format!("{}: write failed", path.display()))?;
            atomic::commit(file)
        }
        None => {
            // Stdout cannot be taken back: a spec that fails part-way (a
            // request beyond the size bounds) must fail before the first row.
            for request in spec.requests(args.seed) {
                request?;
            }
            let stdout = io::stdout();
            let mut out = BufWriter::new(stdout.lock());
            emit(&mut out).context("stdout")
        }
    }
}
