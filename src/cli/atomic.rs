//! Output files that appear whole or not at all: written under a temporary
//! name in the same directory, then renamed over the target. Dropped without
//! [`AtomicFile::commit`] (an error on the way), the temporary file is removed.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;

/// A buffered file that becomes visible at `path` only on commit.
#[derive(Debug)]
pub(crate) struct AtomicFile {
    tmp: PathBuf,
    path: PathBuf,
    out: Option<BufWriter<File>>,
}

impl AtomicFile {
    pub(crate) fn create(path: &Path) -> anyhow::Result<AtomicFile> {
        let name = path.file_name().with_context(|| format!("{}: not a file path", path.display()))?;
        let tmp = path.with_file_name(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
        let file = File::create(&tmp).with_context(|| format!("{}: cannot create", tmp.display()))?;
        Ok(AtomicFile { tmp, path: path.to_owned(), out: Some(BufWriter::with_capacity(1 << 20, file)) })
    }

    pub(crate) fn commit(mut self) -> anyhow::Result<()> {
        let out = self.out.take().expect("not committed yet");
        let file = out
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("{}: write failed", self.tmp.display()))?;
        // No fsync: the rename already guarantees readers never see a partial
        // file, and flushing hundreds of MB to disk would double the run time.
        drop(file);
        std::fs::rename(&self.tmp, &self.path)
            .with_context(|| format!("{}: cannot rename into place", self.path.display()))
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.as_mut().expect("open").write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.out.as_mut().expect("open").write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.as_mut().expect("open").flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Writes `bytes` to `path` atomically.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(bytes).with_context(|| format!("{}: write failed", path.display()))?;
    f.commit()
}
