//! `observe`: drive a real vLLM (OpenAI-compatible) server with a workload
//! and record what it did, as the simulator's own outputs (result JSONL with
//! per-token latencies, TraceV2) — the real baseline `calibrate` and `fit`
//! read. [`client`] times one llm call over HTTP/SSE, [`driver`] sends a
//! workload's request DAGs as the simulator's client would, [`server`] reads
//! the server's configuration and scrapes its `/metrics`. Network I/O runs
//! on tokio; the simulation core never sees it.

pub mod client;
pub mod driver;
pub mod server;
