//! Every input path of `blis-sweep run`, whole, as a user runs it: the
//! binary itself (`CARGO_BIN_EXE_blis-sweep`, built by cargo for the bench)
//! on the same chat traffic (`common/chat.rs`: BLIS's chatbot lengths,
//! Poisson arrivals at 52 req/s, Llama-3.1-8B on one H100) given as a
//! workload JSONL, a TraceV2 pair, a Mooncake trace, an Azure trace, a
//! plain CSV, an LLMServingSim dataset (with every prompt's ids, which the
//! results then carry) and a `vllm bench serve` result file; then
//! the JSONL on 8 replicas (least-requests) at 8× the rate, and on 4
//! prefill and 4 decode replicas at 245 req/s. Every run writes its full output (the
//! per-token result JSONL and the metrics) to a file. For each, the CPU time
//! and peak RSS of that process (`wait4`'s rusage), simulated requests per
//! CPU-second, CPU µs per request, and the peak RSS against the 100k run's.
//!
//!     cargo bench --bench paths                          # every path at 10k, 100k and 1M requests
//!     cargo bench --bench paths -- jsonl,tracev2 100000  # some paths, some sizes
//!
//! The inputs are written once into `target/bench-inputs/` (the 1M ones are
//! 150–350 MB each); the outputs into `target/bench-out/`, removed after
//! each run (a 1M run writes 2.4 GB). Not a test: nothing is asserted; the
//! figures go in the README.

#[path = "common/chat.rs"]
mod chat;

use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use blis_sweep::workload::NodeKind;
use blis_sweep::workload::writer::write_workload_row;

/// The paths, in the order they are run.
const PATHS: [&str; 9] =
    ["jsonl", "tracev2", "mooncake", "azure", "csv", "llmservingsim", "vllm-bench", "cluster", "pd"];

/// Arrival rate of the 4P+4D cluster (as `benches/sim.rs`'s `PD_RATE`:
/// about 93 % of where it saturates).
const PD_RATE: f64 = 245.0;

/// Replicas of the cluster path, fed this many times the traffic.
const REPLICAS: u32 = 8;

/// Mooncake's block: 512 tokens a hash id.
const MOONCAKE_BLOCK: u32 = 512;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The chat requests as (arrival s, input tokens, output tokens).
fn chat_rows(n: u64, rate: f64) -> impl Iterator<Item = (f64, u32, u32)> {
    chat::chat(n, rate).map(|r| match &r.sub_requests[0].kind {
        NodeKind::Llm(c) => (r.arrival_time, c.input_tokens, c.output_tokens),
        NodeKind::ToolCall { .. } => unreachable!("chat is llm calls"),
    })
}

/// Writes `path` by `write` unless it is there (written under a temporary
/// name first: an interrupted bench leaves no half input).
fn once(path: &Path, write: impl FnOnce(&mut dyn Write)) {
    if path.exists() {
        return;
    }
    let tmp = path.with_extension("tmp");
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp).unwrap());
    write(&mut out);
    out.flush().unwrap();
    drop(out);
    std::fs::rename(&tmp, path).unwrap();
}

/// The input of `path` at `n` requests: the arguments that name it (and the
/// scenario), its files written first where missing.
fn input(dir: &Path, path: &str, n: u64) -> Vec<String> {
    let scenario = root().join("sweeps/scenarios/llama-3.1-8b-h100-tp1.yaml").display().to_string();
    let file = |name: &str| dir.join(format!("{name}-{n}"));
    let jsonl = |rate: f64, tag: &str| {
        let p = file(&format!("chat{tag}")).with_extension("jsonl");
        once(&p, |out| {
            let mut buf = Vec::new();
            for r in chat::chat(n, rate) {
                buf.clear();
                write_workload_row(&mut buf, &r);
                out.write_all(&buf).unwrap();
            }
        });
        p.display().to_string()
    };
    match path {
        "jsonl" => vec!["-s".into(), scenario, jsonl(chat::RATE, "")],
        "tracev2" => {
            let base = file("chat-tracev2");
            let (header, data) = (base.with_extension("yaml"), base.with_extension("csv"));
            once(&header, |out| {
                out.write_all(b"trace_version: 3\ntime_unit: microseconds\nmode: generated\nwarm_up_requests: 0\n")
                    .unwrap();
            });
            once(&data, |out| {
                writeln!(out, "request_id,input_tokens,output_tokens,arrival_time_us,token_ids").unwrap();
                for (i, (t, input, output)) in chat_rows(n, chat::RATE).enumerate() {
                    writeln!(out, "{i},{input},{output},{},none", (t * 1e6).round() as u64).unwrap();
                }
            });
            vec![
                "-s".into(),
                scenario,
                "--trace-header".into(),
                header.display().to_string(),
                "--trace-data".into(),
                data.display().to_string(),
            ]
        }
        "mooncake" => {
            // Each request its own blocks: no prompt shares KV, as in the
            // JSONL (whose requests carry no token ids).
            let p = file("chat-mooncake").with_extension("jsonl");
            once(&p, |out| {
                let mut next = 0u64;
                for (t, input, output) in chat_rows(n, chat::RATE) {
                    let blocks = input.div_ceil(MOONCAKE_BLOCK) as u64;
                    let ids: Vec<String> = (next..next + blocks).map(|b| b.to_string()).collect();
                    next += blocks;
                    let ms = (t * 1e3).round() as u64;
                    writeln!(
                        out,
                        "{{\"timestamp\":{ms},\"input_length\":{input},\"output_length\":{output},\"hash_ids\":[{}]}}",
                        ids.join(",")
                    )
                    .unwrap();
                }
            });
            vec!["-s".into(), scenario, "--input".into(), format!("mooncake:{}", p.display())]
        }
        "azure" => {
            let p = file("chat-azure").with_extension("csv");
            once(&p, |out| {
                writeln!(out, "TIMESTAMP,ContextTokens,GeneratedTokens").unwrap();
                for (t, input, output) in chat_rows(n, chat::RATE) {
                    // Seconds past 2023-11-16 00:00 as the trace writes its
                    // stamps, to the 100 ns.
                    let ticks = (t * 1e7).round() as u64;
                    let (s, frac) = (ticks / 10_000_000, ticks % 10_000_000);
                    let (h, m, sec) = (s / 3600, s / 60 % 60, s % 60);
                    let (day, h) = (16 + h / 24, h % 24);
                    writeln!(out, "2023-11-{day:02} {h:02}:{m:02}:{sec:02}.{frac:07},{input},{output}").unwrap();
                }
            });
            vec!["-s".into(), scenario, "--input".into(), format!("azure:{}", p.display())]
        }
        "csv" => {
            let p = file("chat-plain").with_extension("csv");
            once(&p, |out| {
                writeln!(out, "arrival,input_tokens,output_tokens").unwrap();
                for (t, input, output) in chat_rows(n, chat::RATE) {
                    writeln!(out, "{t},{input},{output}").unwrap();
                }
            });
            vec!["-s".into(), scenario, "--input".into(), format!("csv:{}", p.display())]
        }
        "llmservingsim" => {
            // LLMServingSim's dataset carries every prompt's ids: each
            // request its own (a counter), so no prompt shares KV, as in the
            // JSONL.
            let p = file("chat-llmservingsim").with_extension("jsonl");
            once(&p, |out| {
                let mut next = 0u64;
                let mut line = String::new();
                for (t, input, output) in chat_rows(n, chat::RATE) {
                    line.clear();
                    let ns = (t * 1e6).round() as u64 * 1000;
                    line.push_str(&format!(
                        "{{\"arrival_time_ns\":{ns},\"input_toks\":{input},\"output_toks\":{output},\"input_tok_ids\":["
                    ));
                    for k in 0..u64::from(input) {
                        if k > 0 {
                            line.push(',');
                        }
                        line.push_str(&next.to_string());
                        next += 1;
                    }
                    line.push_str("],\"output_tok_ids\":[]}\n");
                    out.write_all(line.as_bytes()).unwrap();
                }
            });
            vec!["-s".into(), scenario, "--input".into(), format!("llmservingsim-dataset:{}", p.display())]
        }
        "vllm-bench" => {
            // `vllm bench serve --save-detailed`'s one JSON object, its
            // per-request lists in send order; the send times are the chat
            // arrivals (the latencies, which only a baseline reads, made up).
            let p = file("chat-vllm-bench").with_extension("json");
            once(&p, |out| {
                // Each list streamed from the generator again: the bench's
                // own memory stays small (a child's peak RSS reads the
                // parent's at the spawn).
                let list = |out: &mut dyn Write, key: &str, f: &dyn Fn(f64, u32, u32) -> String| {
                    write!(out, ",\"{key}\":[").unwrap();
                    for (i, (t, input, output)) in chat_rows(n, chat::RATE).enumerate() {
                        write!(out, "{}{}", if i > 0 { "," } else { "" }, f(t, input, output)).unwrap();
                    }
                    write!(out, "]").unwrap();
                };
                write!(
                    out,
                    "{{\"model_id\":\"meta-llama/Llama-3.1-8B\",\"num_prompts\":{n},\"request_rate\":{}",
                    chat::RATE
                )
                .unwrap();
                list(out, "input_lens", &|_, input, _| input.to_string());
                list(out, "output_lens", &|_, _, output| output.to_string());
                list(out, "ttfts", &|_, _, _| "0.05".to_owned());
                list(out, "itls", &|_, _, _| "[]".to_owned());
                list(out, "latencies", &|_, _, _| "1.0".to_owned());
                list(out, "start_times", &|t, _, _| t.to_string());
                list(out, "errors", &|_, _, _| "\"\"".to_owned());
                writeln!(out, "}}").unwrap();
            });
            vec!["-s".into(), scenario, "--input".into(), format!("vllm-bench:{}", p.display())]
        }
        "cluster" => {
            let s = dir.join("cluster-8.yaml");
            once(&s, |out| {
                let text = std::fs::read_to_string(root().join("sweeps/scenarios/llama-3.1-8b-h100-tp1.yaml")).unwrap();
                let text = text.replace("name: llama-3.1-8b-h100-tp1", "name: llama-3.1-8b-h100-tp1-x8");
                write!(out, "{text}replicas: {REPLICAS}\nrouter: {{policy: least-requests}}\n").unwrap();
            });
            let rate = chat::RATE * f64::from(REPLICAS);
            vec!["-s".into(), s.display().to_string(), jsonl(rate, "-x8")]
        }
        "pd" => {
            let s = root().join("tests/data/pools-scenarios/pd-4p4d-llama-3.1-8b-h100.yaml");
            vec!["-s".into(), s.display().to_string(), jsonl(PD_RATE, "-pd")]
        }
        other => panic!("no path {other}: one of {PATHS:?}"),
    }
}

/// One run's cost: CPU seconds (user + system), peak RSS in MiB, wall
/// seconds, bytes of result JSONL.
struct Cost {
    cpu_s: f64,
    rss_mib: f64,
    wall_s: f64,
    out_bytes: u64,
}

/// Runs the binary with `args` and its full output, and reaps it with
/// `wait4` for its own rusage.
#[expect(clippy::zombie_processes, reason = "reaped by wait4, which gives its rusage")]
fn measure(args: &[String], out: &Path) -> Cost {
    let results = out.join("results.jsonl");
    let metrics = out.join("metrics.json");
    let wall = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_blis-sweep"))
        .arg("run")
        .arg("-q")
        .args(args)
        .arg("-o")
        .arg(&results)
        .arg("--metrics")
        .arg(&metrics)
        .spawn()
        .expect("the binary runs");
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill; the pid is
    // our child's, not yet reaped (std's `Child` is dropped without waiting).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert!(pid > 0 && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "{args:?} failed");
    let wall_s = wall.elapsed().as_secs_f64();
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let out_bytes = std::fs::metadata(&results).map_or(0, |m| m.len());
    std::fs::remove_file(&results).unwrap();
    std::fs::remove_file(&metrics).unwrap();
    Cost {
        cpu_s: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        rss_mib: usage.ru_maxrss as f64 / 1024.0,
        wall_s,
        out_bytes,
    }
}

fn main() {
    // cargo appends `--bench`; only positional arguments are ours.
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let paths: Vec<&str> = args.first().map_or(PATHS.to_vec(), |p| p.split(',').collect());
    let sizes: Vec<u64> = args.get(1).map_or(vec![10_000, 100_000, 1_000_000], |s| {
        s.split(',').map(|n| n.parse().expect("a request count")).collect()
    });
    let inputs = root().join("target/bench-inputs");
    let out = root().join("target/bench-out");
    std::fs::create_dir_all(&inputs).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    println!(
        "{:<13} {:>9} {:>9} {:>14} {:>11} {:>10} {:>12} {:>9} {:>10}",
        "path", "requests", "CPU s", "sim req/CPU-s", "CPU µs/req", "RSS MiB", "RSS / 100k", "wall s", "output MB"
    );
    for path in paths {
        let mut rss_100k = None;
        for &n in &sizes {
            let args = input(&inputs, path, n);
            let c = measure(&args, &out);
            if n == 100_000 {
                rss_100k = Some(c.rss_mib);
            }
            let ratio =
                rss_100k.filter(|_| n > 100_000).map_or_else(|| "–".to_owned(), |r| format!("{:.2}", c.rss_mib / r));
            println!(
                "{path:<13} {n:>9} {:>9.3} {:>14.0} {:>11.2} {:>10.1} {ratio:>12} {:>9.2} {:>10.0}",
                c.cpu_s,
                n as f64 / c.cpu_s,
                c.cpu_s / n as f64 * 1e6,
                c.rss_mib,
                c.wall_s,
                c.out_bytes as f64 / 1e6
            );
        }
    }
}
