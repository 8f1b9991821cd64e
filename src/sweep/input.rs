//! The workload file as the sweep reads it: once, before any run starts, to
//! check every row (a bad row is a plan error, not twelve failed runs) and to
//! hash its bytes for the run ids, streaming, never whole in memory. Every
//! run then reads the file again, so a workload that cannot be read twice (a
//! FIFO, `/dev/stdin` on a pipe) is copied during that first read into the
//! output folder (`.workload-<pid>.jsonl`, removed when the sweep ends, on
//! error paths too) and the runs read the copy.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use super::executor::SweepError;
use super::hash::Fnv64;
use super::output_dir::io_err;
use crate::workload::reader::{Format, Reader};

/// The spooled copy of a stream workload; dropping it removes the file.
#[derive(Debug)]
pub(crate) struct Spool {
    pub(crate) path: PathBuf,
}

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A reader that hashes and/or copies what passes through: the sweep's
/// first read of its workload, and `run`'s of a piped one. A failed copy is
/// kept in `copy_error` (the read goes on, so the workload is still checked).
pub(crate) struct Tap<'a> {
    pub(crate) inner: File,
    pub(crate) hash: Option<&'a mut Fnv64>,
    pub(crate) copy: Option<&'a mut dyn Write>,
    pub(crate) copy_error: &'a mut Option<std::io::Error>,
}

impl Read for Tap<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(hash) = &mut self.hash {
            hash.update(&buf[..n]);
        }
        if let Some(copy) = &mut self.copy
            && self.copy_error.is_none()
            && let Err(e) = copy.write_all(&buf[..n])
        {
            *self.copy_error = Some(e);
        }
        Ok(n)
    }
}

/// What the first read found.
pub(crate) struct FirstRead {
    /// The hash of the workload's bytes.
    pub(crate) content: u64,
    /// Its copy in the output folder, if it is a stream.
    pub(crate) spool: Option<Spool>,
}

/// Reads and checks the workload at `path`, copying it into `dir` if it is a
/// stream.
pub(crate) fn read_workload(path: &Path, stream: bool, dir: &Path) -> Result<FirstRead, SweepError> {
    let file = File::open(path).map_err(io_err(path))?;
    let spool = if stream {
        let spool = Spool { path: dir.join(format!(".workload-{}.jsonl", std::process::id())) };
        let out = File::create(&spool.path).map_err(io_err(&spool.path))?;
        Some((spool, BufWriter::with_capacity(1 << 20, out)))
    } else {
        None
    };
    let (spool, mut copy) = spool.map_or((None, None), |(s, c)| (Some(s), Some(c)));
    let mut hash = Fnv64::new();
    let mut copy_error = None;
    let tap = Tap {
        inner: file,
        hash: Some(&mut hash),
        copy: copy.as_mut().map(|c| c as &mut dyn Write),
        copy_error: &mut copy_error,
    };
    for row in Reader::new(BufReader::with_capacity(1 << 20, tap), path.display().to_string(), Format::Workload) {
        row?;
    }
    if let (Some(spool), Some(copy)) = (&spool, copy) {
        let flushed = match copy_error {
            Some(e) => Err(e),
            None => copy.into_inner().map(drop).map_err(|e| e.into_error()),
        };
        flushed.map_err(io_err(&spool.path))?;
    }
    Ok(FirstRead { content: hash.finish(), spool })
}
