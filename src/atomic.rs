//! Output files that appear whole or not at all, for every command and the
//! sweep: written under a temporary name in the same directory, then renamed
//! over the target. Dropped without [`AtomicFile::commit`] (an error on the
//! way), or when the commit itself fails, the temporary file is removed.
//! Temporary names (`.NAME.tmp-<pid>-<n>`) are unique per process and per
//! file, and created exclusively.
//!
//! A target that is not a regular file (`/dev/null`, `/dev/stdout`, a FIFO)
//! is written in place: renaming over it would replace the device or pipe
//! with a file. A symlink is followed, so the file it points to is replaced
//! and the link stays a link.
//!
//! Several outputs of one command are committed together by [`commit_all`]:
//! every one is flushed and closed first (a full disk shows there, before
//! any is renamed), then all are renamed; a rename that still fails puts
//! back the files already renamed over. So either every output is in place
//! or none is, and the files they replace are as they were.
//!
//! Errors are `io::Error`s whose message says what failed but not the path:
//! callers name it (the CLI as context, the sweep in its error type).

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Makes temporary names unique within the process (two outputs of one
/// command in one directory); the pid makes them unique across processes.
static NEXT_TMP: AtomicU32 = AtomicU32::new(0);

/// Symlink hops followed before giving up (Linux's own limit, `ELOOP`).
const MAX_SYMLINK_HOPS: u32 = 40;

/// `e` with `what` in front of its message, its kind kept.
fn failed(what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A buffered file that becomes visible at its path only on commit.
#[derive(Debug)]
pub(crate) struct AtomicFile {
    /// The temporary file; `None` when writing in place.
    tmp: Option<PathBuf>,
    path: PathBuf,
    /// `None` once flushed and closed.
    out: Option<BufWriter<File>>,
    /// Renamed into place (or written in place): nothing to remove.
    committed: bool,
}

/// A temporary name beside `path` (`.NAME.tmp-<pid>-<n>`), unique in this
/// process and across processes.
fn temporary_name(path: &Path, name: &std::ffi::OsStr) -> PathBuf {
    let n = NEXT_TMP.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{}.tmp-{}-{n}", name.to_string_lossy(), std::process::id()))
}

impl AtomicFile {
    pub(crate) fn create(path: &Path) -> io::Result<AtomicFile> {
        // (metadata follows symlinks: /dev/stdout → a pipe is a pipe.)
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => {
                return Err(io::Error::new(io::ErrorKind::IsADirectory, "is a directory, not a file path"));
            }
            Ok(m) if !m.is_file() => {
                let file =
                    OpenOptions::new().write(true).open(path).map_err(|e| failed("cannot open for writing", e))?;
                let path = path.to_path_buf();
                let out = Some(BufWriter::with_capacity(1 << 20, file));
                return Ok(AtomicFile { tmp: None, path, out, committed: false });
            }
            _ => {}
        }
        let path = resolve_symlinks(path)?;
        let Some(name) = path.file_name() else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a file path"));
        };
        let tmp = temporary_name(&path, name);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| failed("cannot create a file beside it", e))?;
        let out = Some(BufWriter::with_capacity(1 << 20, file));
        Ok(AtomicFile { tmp: Some(tmp), path, out, committed: false })
    }

    /// The file being written (the target itself when writing in place).
    pub(crate) fn tmp(&self) -> &Path {
        self.tmp.as_deref().unwrap_or(&self.path)
    }

    /// The file it becomes.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes and renames into place; on any failure the temporary file
    /// is removed and the target left as it was.
    pub(crate) fn commit(self) -> io::Result<()> {
        commit_all(vec![self]).map_err(|(_, e)| e)
    }

    /// Flushes the buffer and closes the file (once).
    fn finish(&mut self) -> io::Result<()> {
        match self.out.take() {
            // No fsync: the rename already guarantees readers never see a
            // partial file, and flushing hundreds of MB to disk would double
            // the run time.
            Some(out) => out.into_inner().map(drop).map_err(|e| e.into_error()),
            None => Ok(()),
        }
    }
}

/// Commits `files` together: each flushed and closed, then each renamed
/// into place. On any failure, no target is changed (those already renamed
/// over are put back: a target that existed from a link to it made before
/// its rename, one that did not by removing it), every temporary file is
/// removed, and the error names the file that failed. Outputs written in
/// place (a device) cannot be taken back.
pub(crate) fn commit_all(mut files: Vec<AtomicFile>) -> Result<(), (PathBuf, io::Error)> {
    for f in &mut files {
        f.finish().map_err(|e| (f.path.clone(), failed("write failed", e)))?;
    }
    // (index, the old target's link) of each file renamed so far.
    let mut renamed: Vec<(usize, Option<PathBuf>)> = Vec::with_capacity(files.len());
    let mut failure = None;
    let n = files.len();
    for (i, f) in files.iter_mut().enumerate() {
        let Some(tmp) = &f.tmp else {
            f.committed = true;
            continue;
        };
        // Only a later rename's failure puts this one back: the last file
        // (a lone one: every sweep part) needs no link to its old target.
        let old = if i + 1 < n { keep_old(&f.path) } else { None };
        match std::fs::rename(tmp, &f.path) {
            Ok(()) => {
                f.committed = true;
                renamed.push((i, old));
            }
            Err(e) => {
                if let Some(old) = old {
                    let _ = std::fs::remove_file(old);
                }
                failure = Some((f.path.clone(), failed("write failed", e)));
                break;
            }
        }
    }
    for (i, old) in renamed.into_iter().rev() {
        match (&failure, old) {
            (None, Some(old)) => {
                let _ = std::fs::remove_file(old);
            }
            (None, None) => {}
            (Some(_), Some(old)) => {
                let _ = std::fs::rename(old, &files[i].path);
            }
            (Some(_), None) => {
                let _ = std::fs::remove_file(&files[i].path);
            }
        }
    }
    // Dropping the files not renamed removes their temporary files.
    failure.map_or(Ok(()), Err)
}

/// A second link to the regular file at `path` (what a rename over it would
/// replace), to put it back if the commit fails; `None` when there is none
/// or the file system makes no links (then it cannot be put back).
fn keep_old(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    if !std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
        return None;
    }
    let old = temporary_name(path, name);
    std::fs::hard_link(path, &old).ok().map(|()| old)
}

/// Follows `path` through symlinks to what they name (which may not exist yet).
pub(crate) fn resolve_symlinks(path: &Path) -> io::Result<PathBuf> {
    let mut path = path.to_path_buf();
    for _ in 0..MAX_SYMLINK_HOPS {
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&path).map_err(|e| failed("cannot read the link", e))?;
                path = match path.parent() {
                    Some(dir) => dir.join(target),
                    None => target,
                };
            }
            _ => return Ok(path),
        }
    }
    Err(io::Error::other("too many levels of symbolic links"))
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.as_mut().ok_or_else(|| io::Error::other("committed"))?.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.out.as_mut().ok_or_else(|| io::Error::other("committed"))?.write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.as_mut().ok_or_else(|| io::Error::other("committed"))?.flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        drop(self.out.take());
        if !self.committed
            && let Some(tmp) = &self.tmp
        {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// A read-write file in the temporary directory (`TMPDIR`), already removed
/// from it: it lives while open and never outlives the process. Returns the
/// name it had, for messages.
pub(crate) fn unnamed_temp_file() -> io::Result<(PathBuf, File)> {
    let n = NEXT_TMP.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!(".blis-sweep-spool-{}-{n}", std::process::id()));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| failed(&format!("{}: cannot create a temporary file (set TMPDIR)", path.display()), e))?;
    let _ = std::fs::remove_file(&path);
    Ok((path, file))
}

/// Writes `bytes` to `path` atomically.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(bytes).map_err(|e| failed("write failed", e))?;
    f.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("blis-atomic-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_symlink_is_followed_and_stays_a_link() {
        let dir = temp_dir("link");
        std::fs::write(dir.join("real"), "old").unwrap();
        std::os::unix::fs::symlink("real", dir.join("link")).unwrap();
        write_file(&dir.join("link"), b"new").unwrap();
        assert!(std::fs::symlink_metadata(dir.join("link")).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(dir.join("real")).unwrap(), "new");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2, "no temporary file left");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_device_is_written_in_place() {
        // Through a link of our own: a regression replaces the link, not /dev/null.
        let dir = temp_dir("device");
        std::os::unix::fs::symlink("/dev/null", dir.join("null")).unwrap();
        write_file(&dir.join("null"), b"x").unwrap();
        assert!(std::fs::symlink_metadata(dir.join("null")).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary file left");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_failed_commit_leaves_nothing_behind() {
        let dir = temp_dir("fail");
        let mut f = AtomicFile::create(&dir.join("out")).unwrap();
        f.write_all(b"data").unwrap();
        // The target becomes a non-empty directory: the rename fails.
        std::fs::create_dir_all(dir.join("out/inside")).unwrap();
        assert!(f.commit().is_err());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "only the directory");
        assert!(AtomicFile::create(&dir.join("out")).unwrap_err().to_string().contains("is a directory"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn outputs_committed_together_are_all_put_back_when_one_fails() {
        let dir = temp_dir("all");
        std::fs::write(dir.join("a"), "old a").unwrap();
        let mut a = AtomicFile::create(&dir.join("a")).unwrap();
        let mut b = AtomicFile::create(&dir.join("b")).unwrap();
        let mut c = AtomicFile::create(&dir.join("c")).unwrap();
        for f in [&mut a, &mut b, &mut c] {
            f.write_all(b"new").unwrap();
        }
        // c's rename fails (its target is a non-empty directory) after a and b are in place.
        std::fs::create_dir_all(dir.join("c/inside")).unwrap();
        let (path, _) = commit_all(vec![a, b, c]).unwrap_err();
        assert_eq!(path, dir.join("c"));
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "old a");
        let mut left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        left.sort();
        assert_eq!(left, ["a", "c"], "b removed, no temporary or kept file left");
        // And when every rename succeeds, every file is new and nothing else is left.
        std::fs::remove_dir_all(dir.join("c")).unwrap();
        let files: Vec<_> = ["a", "b"].iter().map(|n| AtomicFile::create(&dir.join(n)).unwrap()).collect();
        let files: Vec<_> = files
            .into_iter()
            .map(|mut f| {
                f.write_all(b"newer").unwrap();
                f
            })
            .collect();
        commit_all(files).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "newer");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn two_outputs_in_one_directory_get_distinct_temporary_names() {
        let dir = temp_dir("two");
        let a = AtomicFile::create(&dir.join("x")).unwrap();
        let b = AtomicFile::create(&dir.join("x")).unwrap();
        assert_ne!(a.tmp, b.tmp);
        drop((a, b));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
