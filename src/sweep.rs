//! The sweep engine: a plan's grid of runs (scenario × concurrency × seed ×
//! rate scale × overrides), each one single-threaded simulation, run in
//! parallel on a rayon pool; each run writes its own Parquet parts
//! ([`parts`]), one collector thread puts finished runs in place. [`plan`]
//! mirrors the file, [`grid`] expands it ([`source`]: where its runs read
//! their requests), [`executor`] runs it ([`error`]: why a sweep stops), [`tables`]
//! defines the tables. An output folder belongs to one plan
//! and one sweep at a time ([`output_dir`], [`lock`]); a finished run is
//! reused by a later sweep only when nothing it depends on changed
//! ([`resume`]); [`shard`] picks a machine's share of the grid; [`input`] reads the workload once, [`summary`] writes the
//! per-sweep tables. What drives the sweep from above (a capacity search,
//! the calibration matrix) lives outside it.

mod collector;
pub mod error;
pub mod estimate;
pub mod executor;
pub mod grid;
pub(crate) mod input;
mod lock;
pub(crate) mod output_dir;
mod parts;
pub mod plan;
mod resume;
pub mod shard;
pub mod source;
mod summary;
pub(crate) mod tables;
