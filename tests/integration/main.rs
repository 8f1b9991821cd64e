//! One integration-test binary (one link on a 2-core machine), one module
//! per area. `util` runs the real binary on files in a temporary directory.

mod parquet_util;
mod util;

mod calibrate;
mod capacity;
mod capacity_pools;
mod classes;
mod cli;
mod client;
mod cluster;
mod conformance;
mod conformance_features;
mod dag;
mod defects_bounds;
mod defects_capacity;
mod defects_io;
mod defects_latency;
mod defects_tables;
mod defects_trace;
mod engine;
mod eval_runs;
mod feature_tables;
mod fuzz;
mod golden;
mod hardening;
mod import;
mod ispass;
mod kv_offload;
mod load_trend;
mod lora;
mod pd_properties;
mod pools;
mod pools_outputs;
mod priority;
mod properties;
mod reject;
mod report;
mod scenario;
mod silicon_protocols;
mod slo;
mod speculative;
mod sweep;
mod sweep_resume;
mod tables;
