//! The sweep engine: a plan's grid of runs (scenario × concurrency × seed ×
//! rate scale × overrides), each one single-threaded simulation, run in
//! parallel on a rayon pool; rows stream to one collector thread that writes
//! Parquet. [`plan`] mirrors the file, [`grid`] expands it, [`executor`] runs
//! it, [`tables`] defines the tables. [`calibration`] is the other kind of
//! plan: real runs replayed and compared with their measurements.

pub mod calibration;
mod collector;
pub mod executor;
pub mod grid;
pub mod plan;
mod tables;
