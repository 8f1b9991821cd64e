//! `blis-sweep generate`: a synthetic workload as JSONL, from a spec file
//! (the same mapping a plan's `workload.generate` holds) or from flags.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use super::atomic;
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

pub(crate) fn run(args: GenerateArgs) -> anyhow::Result<()> {
    let output = match &args.output {
        Some(path) => atomic::Named::given("-o", path),
        None => atomic::Named::stdout("-o"),
    };
    let spec = args.spec.as_deref().map(|path| atomic::Named::given("--spec", path));
    atomic::check_distinct(&[output], spec.as_slice())?;
    let mut spec_text = String::new();
    let (mut spec, base) = match &args.spec {
        Some(path) => {
            spec_text = std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
            let spec: GenerateSpec = crate::yaml::parse_file(path, &spec_text)?;
            (spec, path.parent().unwrap_or(Path::new(".")).to_path_buf())
        }
        None => {
            let (Some(rate), Some(num_requests)) = (args.rate, args.num_requests) else {
                bail!("give --spec SPEC.yaml, or --rate and --num-requests (with --preset)");
            };
            let spec = GenerateSpec {
                preset: Some(args.preset.clone().unwrap_or_else(|| "chatbot".to_owned())),
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
            (spec, PathBuf::from("."))
        }
    };
    if args.spec.is_some() {
        if let Some(p) = args.preset {
            spec.preset = Some(p);
        }
        if let Some(r) = args.rate {
            spec.rate = r;
        }
        if let Some(n) = args.num_requests {
            spec.num_requests = n;
        }
    }
    // Errors name the spec file and the line of the key, or the flag.
    let fail = |e: GenerateError| match &args.spec {
        Some(p) => anyhow::anyhow!("{}: {e}", crate::yaml::locate(p, &spec_text, &e.field)),
        None => anyhow::anyhow!("--{}: {}", e.field.replace('_', "-"), e.reason),
    };
    let generator = Generator::new(&spec, &base).map_err(fail)?;
    let mut buf = Vec::with_capacity(1 << 16);
    let mut emit = |out: &mut dyn Write| -> anyhow::Result<()> {
        for request in generator.requests(args.seed) {
            buf.clear();
            write_workload_row(&mut buf, &request.map_err(fail)?);
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
            for request in generator.requests(args.seed) {
                request.map_err(fail)?;
            }
            let stdout = io::stdout();
            let mut out = BufWriter::new(stdout.lock());
            emit(&mut out).context("stdout")
        }
    }
}
