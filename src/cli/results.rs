//! `blis-sweep results`: absolute token times from a result JSONL.
//!
//! Walks each DAG from its arrival time, as the format's `scripts/results.py`
//! does: a root starts `interval` after arrival, any other node `interval`
//! after its last predecessor finishes; an llm node's token k is at its start
//! plus the first k+1 latencies, and it finishes with its last token; a tool
//! call finishes `duration` after it starts. Nodes that carry an `error` end
//! the walk along their branch. Times are summed in integer microseconds.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::path::PathBuf;

use anyhow::Context;

use crate::workload::reader::{Format, Reader};
use crate::workload::{NodeKind, seconds_to_us};

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
    writeln!(out, "request_id,node,token_index,time_s")?;
    for row in Reader::new(BufReader::new(f), file.as_str(), Format::Results) {
        let request = row?;
        let n = request.sub_requests.len();
        let mut pending = vec![0u32; n];
        for sub in &request.sub_requests {
            for &j in &sub.next {
                pending[j as usize] += 1;
            }
        }
        let arrival = seconds_to_us(request.arrival_time);
        let mut ready = vec![arrival; n];
        let mut stack: Vec<usize> = request.initial.iter().rev().map(|&i| i as usize).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = stack.pop() {
            let sub = &request.sub_requests[i];
            let result = sub.result.as_ref().expect("result rows carry results");
            let start = ready[i] + sub.interval_us();
            let finish = match &sub.kind {
                NodeKind::ToolCall { duration } => start + seconds_to_us(*duration),
                NodeKind::Llm(_) => {
                    let mut t = start;
                    for (k, &latency) in result.token_latency.iter().enumerate() {
                        t += seconds_to_us(latency);
                        order.push((i, k, t));
                    }
                    t
                }
            };
            if result.error.is_some() {
                continue;
            }
            for &j in sub.next.iter().rev() {
                let j = j as usize;
                // Finishes are never before arrival, so starting from it is safe.
                ready[j] = ready[j].max(finish);
                pending[j] -= 1;
                if pending[j] == 0 {
                    stack.push(j);
                }
            }
        }
        order.sort_unstable();
        for (node, k, t) in order {
            writeln!(
                out,
                "{},{node},{k},{}.{:06}",
                csv_field(&request.request_id.to_string()),
                t / 1_000_000,
                t % 1_000_000
            )?;
        }
    }
    out.flush()?;
    Ok(())
}

/// Quotes a CSV field when it needs it (RFC 4180).
fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")).into() } else { s.into() }
}
