//! Calibration: how far the simulator is from a real vLLM server on the
//! same requests. [`observed`] reads either side (result JSONL or TraceV2),
//! [`report`] matches and compares them request by request, [`aggregates`]
//! compares runs known only by their aggregates, [`load`] shows the error
//! against load over a run's rate stages, [`stats`] holds the
//! statistics, [`fit`] fits latency constants to real runs, [`matrix`]
//! replays a plan of real runs on the sweep and tabulates the errors, [`replay`]
//! resolves what a replayed measured run needs from its scenario.

pub mod aggregates;
pub mod fit;
pub mod ispass;
pub mod load;
pub mod matrix;
pub mod observed;
pub mod replay;
pub mod report;
pub mod stats;
