//! The collector: one thread that puts every finished run in place. Workers
//! write a run's Parquet parts under temporary names ([`super::parts`]) and
//! send them, with the run's outcome, over a bounded channel; the collector
//! renames the parts into place, then writes the run's JSON files,
//! `status.json` last: a run is finished exactly when its `status.json`
//! exists, which is what a restart after `kill -9` checks. One part per run
//! keeps every file's bytes independent of `--jobs` and of what else ran at
//! the same time.
//!
//! On the first error (its own, or one a worker reports) it raises the
//! sweep's cancel flag, so workers stop instead of simulating runs whose
//! results could not be kept, and drains the channel (dropping, so removing,
//! the parts it is sent) so no worker blocks. Runs finished before stay valid.

use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::Receiver;

use super::error::SweepError;
use super::output_dir::{Layout, TmpFile, io_err, write_atomic};
use super::resume::RunStatus;
use crate::metrics::Metrics;

/// What workers tell the collector.
pub(crate) enum Message {
    /// Run `run_id` is over; `parts` are its finished table parts (none for
    /// a run that failed).
    Done { run_id: String, status: Box<RunStatus>, metrics: Option<Box<Metrics>>, wall_s: f64, parts: Vec<TmpFile> },
    /// A worker could not write a file of its own: the sweep stops.
    Fatal(SweepError),
}

/// Runs the collector until every sender is gone. `on_done(run_id, status,
/// wall_s, requests)` is called after each run's files are in place. Returns
/// the first error, after which it sets `cancel` and drains the channel.
pub(crate) fn collect(
    layout: &Layout,
    rx: Receiver<Message>,
    cancel: &AtomicBool,
    on_done: &mut dyn FnMut(&str, &RunStatus, f64, u64),
) -> Result<(), SweepError> {
    let mut first_error = None;
    for message in rx {
        if first_error.is_some() {
            continue;
        }
        let result = match message {
            Message::Fatal(e) => Err(e),
            Message::Done { run_id, status, metrics, wall_s, parts } => (|| {
                for part in parts {
                    part.commit()?;
                }
                let dir = layout.run_dir(&run_id);
                std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
                let json_err = |e: serde_json::Error| io_err(&dir)(e.into());
                if let Some(m) = &metrics {
                    let mut json = serde_json::to_string_pretty(m).map_err(json_err)?;
                    json.push('\n');
                    write_atomic(&dir.join("metrics.json"), json.as_bytes())?;
                }
                write_atomic(&dir.join("timing.json"), format!("{{\"wall_s\": {wall_s}}}\n").as_bytes())?;
                let mut json = serde_json::to_string_pretty(&status).map_err(json_err)?;
                json.push('\n');
                write_atomic(&layout.status(&run_id), json.as_bytes())?;
                on_done(&run_id, &status, wall_s, metrics.as_ref().map_or(0, |m| m.injected_requests));
                Ok(())
            })(),
        };
        if let Err(e) = result {
            cancel.store(true, Ordering::Relaxed);
            first_error = Some(e);
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
