//! Calibration: how far the simulator is from a real vLLM server on the
//! same requests. [`observed`] reads either side (result JSONL or TraceV2),
//! [`report`] matches and compares them, [`stats`] holds the statistics.

pub mod fit;
pub mod observed;
pub mod report;
pub mod stats;
