//! The workload file as the sweep reads it: once, before any run starts, to
//! check every row (a bad row is a plan error, not twelve failed runs) and to
//! hash its bytes for the run ids, streaming, never whole in memory. Every
//! run then reads the file again; a workload that cannot be read twice (a
//! FIFO, `/dev/stdin` on a pipe) is opened through [`crate::spool`], which
//! copies it on this first read, and the runs read the copy.

use std::io::{BufReader, Read};
use std::path::Path;

use super::error::SweepError;
use super::output_dir::io_err;
use crate::hash::Fnv64;
use crate::workload::reader::{Format, Reader};

/// A reader that hashes what passes through: the sweep's first read of its
/// workload.
struct Tap<'a, R> {
    inner: R,
    hash: &'a mut Fnv64,
}

impl<R: Read> Read for Tap<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

/// What the first read found.
pub(crate) struct FirstRead {
    /// The hash of the workload's bytes.
    pub(crate) content: u64,
}

/// Reads and checks the workload at `path` (a stream through its copy).
pub(crate) fn read_workload(path: &Path) -> Result<FirstRead, SweepError> {
    let file = crate::spool::open(path).map_err(io_err(path))?;
    let mut hash = Fnv64::new();
    let tap = Tap { inner: file, hash: &mut hash };
    for row in Reader::new(BufReader::with_capacity(1 << 20, tap), path.display().to_string(), Format::Workload) {
        row?;
    }
    Ok(FirstRead { content: hash.finish() })
}
