//! `blis-sweep results`: absolute token times from a result JSONL, as CSV,
//! walking each DAG from its arrival (see [`crate::workload::timeline`]),
//! with the replica that served each node when a cluster did.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::path::PathBuf;

use anyhow::Context;

use crate::workload::reader::{Format, Reader};
use crate::workload::timeline::node_times;

#[derive(Debug, clap::Args)]
pub(crate) struct ResultsArgs {
    /// Result JSONL (ours, or a vLLM baseline in the same format).
    #[arg(value_name = "RESULTS.jsonl")]
    results: PathBuf,
}

pub(crate) fn run(args: ResultsArgs) -> anyhow::Result<()> {
    let file = args.results.display().to_string();
    let f = File::open(&args.results).with_context(|| format!("{file}: cannot open"))?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    writeln!(out, "request_id,node,token_index,time_s,replica")?;
    for row in Reader::new(BufReader::new(f), file.as_str(), Format::Results) {
        let request = row?;
        let mut order = Vec::new();
        for (node, times) in node_times(&request).into_iter().enumerate() {
            for (k, &t) in times.iter().flat_map(|t| t.token_times_us.iter()).enumerate() {
                order.push((node, k, t));
            }
        }
        order.sort_unstable();
        for (node, k, t) in order {
            write!(
                out,
                "{},{node},{k},{}.{:06},",
                csv_field(&request.request_id.to_string()),
                t / 1_000_000,
                t % 1_000_000
            )?;
            // The replica that served the node, in a cluster of more than one.
            match request.sub_requests[node].result.as_ref().and_then(|r| r.replica) {
                Some(r) => writeln!(out, "{r}")?,
                None => writeln!(out)?,
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// Quotes a CSV field when it needs it (RFC 4180).
fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")).into() } else { s.into() }
}
