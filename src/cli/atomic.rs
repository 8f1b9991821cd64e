//! The CLI's side of [`crate::atomic`]: the same output files, with the
//! path in front of every error.

use std::path::Path;

use anyhow::Context;

pub(crate) use crate::atomic::AtomicFile;

/// [`AtomicFile::create`], the error naming `path`.
pub(crate) fn create(path: &Path) -> anyhow::Result<AtomicFile> {
    AtomicFile::create(path).with_context(|| path.display().to_string())
}

/// [`AtomicFile::commit`], the error naming the file.
pub(crate) fn commit(file: AtomicFile) -> anyhow::Result<()> {
    let path = file.path().display().to_string();
    file.commit().context(path)
}

/// Writes `bytes` to `path` atomically, the error naming `path`.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    crate::atomic::write_file(path, bytes).with_context(|| path.display().to_string())
}

/// A temporary file already removed from its directory (see
/// [`crate::atomic::unnamed_temp_file`]).
pub(crate) fn unnamed_temp_file() -> anyhow::Result<(std::path::PathBuf, std::fs::File)> {
    Ok(crate::atomic::unnamed_temp_file()?)
}
