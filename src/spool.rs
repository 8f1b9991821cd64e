//! Input files that cannot be read twice (a FIFO, `/dev/stdin` on a pipe, a
//! character device), made readable as often as a command needs: the first
//! open copies the whole stream into an unnamed temporary file (`TMPDIR`,
//! see [`crate::atomic::unnamed_temp_file`]) and every open of the same
//! file, then and later, in any thread, reads that copy from its start.
//!
//! This is the one place every input is opened that a command may read more
//! than once: the workload JSONL (`run` validates it, then simulates it; a
//! sweep hashes it, checks it, then runs it), every importer's trace (a
//! count pass, the runs, `import`'s block-reuse pass; a TraceV2 header and
//! its data) and a plan's imported trace (hashed for the run ids, checked,
//! then read by each run). A regular file is opened as it is.
//!
//! Copies are keyed by the stream's device and inode, not its name, so
//! `/dev/stdin`, `/proc/self/fd/0` and `/dev/fd/0` are one stream; and a
//! copy is looked up before the path is opened, since opening a FIFO whose
//! writer is gone blocks for ever. Copies live until the process exits
//! (their directory entry is removed at once, so nothing outlives it).

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The copies made so far: (device, inode) of the stream → its copy.
static SPOOLS: Mutex<Vec<((u64, u64), Arc<File>)>> = Mutex::new(Vec::new());

/// An opened input: the file itself, or a reader of a stream's copy.
#[derive(Debug)]
pub(crate) enum Input {
    /// A regular file (or a directory, which fails on read as it would).
    File(File),
    /// A stream's copy, read from `pos` with positional reads, so readers
    /// in several threads never share an offset.
    Spooled {
        /// The copy.
        file: Arc<File>,
        /// The next byte to read.
        pos: u64,
    },
}

impl Read for Input {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Input::File(f) => f.read(buf),
            Input::Spooled { file, pos } => {
                let n = file.read_at(buf, *pos)?;
                *pos += n as u64;
                Ok(n)
            }
        }
    }
}

/// Whether `path` exists but cannot be read twice as it is.
pub(crate) fn is_stream(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// Opens `path` for reading; a stream is copied on its first open and read
/// from the copy on every open. Errors are the OS's (the caller names the
/// path), or say the copy failed.
pub(crate) fn open(path: &Path) -> io::Result<Input> {
    // (metadata follows symlinks: /dev/stdin → a pipe is a pipe; it never
    // blocks, unlike opening a FIFO.)
    let meta = std::fs::metadata(path)?;
    if meta.is_file() || meta.is_dir() {
        return File::open(path).map(Input::File);
    }
    let key = (meta.dev(), meta.ino());
    // Held while copying: a second thread opening the same stream waits for
    // the copy instead of reading what is left of the stream.
    let mut spools = SPOOLS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, file)) = spools.iter().find(|(k, _)| *k == key) {
        return Ok(Input::Spooled { file: Arc::clone(file), pos: 0 });
    }
    let mut stream = File::open(path)?;
    let (tmp, copy) = crate::atomic::unnamed_temp_file()?;
    let copied = (|| {
        let mut out = BufWriter::with_capacity(1 << 20, &copy);
        io::copy(&mut stream, &mut out)?;
        out.flush()
    })();
    copied.map_err(|e| io::Error::new(e.kind(), format!("copying it to {}: {e}", tmp.display())))?;
    let file = Arc::new(copy);
    spools.push((key, Arc::clone(&file)));
    Ok(Input::Spooled { file, pos: 0 })
}

/// The bytes of `path`, whole (a small file: a header, a spec), through
/// [`open`].
pub(crate) fn read(path: &Path) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    open(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("blis-spool-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo").arg(path).status().unwrap();
        assert!(status.success());
    }

    #[test]
    fn a_fifo_is_read_once_and_then_from_its_copy() {
        let dir = temp_dir("fifo");
        let fifo = dir.join("f");
        mkfifo(&fifo);
        let writer = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::write(fifo, "one\ntwo\n").unwrap())
        };
        let mut first = String::new();
        open(&fifo).unwrap().read_to_string(&mut first).unwrap();
        writer.join().unwrap();
        // The writer is gone: opening the FIFO itself would block for ever.
        let mut a = open(&fifo).unwrap();
        let mut b = open(&fifo).unwrap();
        let (mut ta, mut tb) = (String::new(), String::new());
        let mut byte = [0u8; 4];
        a.read_exact(&mut byte).unwrap();
        b.read_to_string(&mut tb).unwrap();
        a.read_to_string(&mut ta).unwrap();
        assert_eq!((first.as_str(), tb.as_str(), ta.as_str()), ("one\ntwo\n", "one\ntwo\n", "two\n"));
        assert_eq!(read(&fifo).unwrap(), b"one\ntwo\n");
        assert!(is_stream(&fifo));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no copy left in the directory");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_regular_file_is_read_as_it_is_each_time() {
        let dir = temp_dir("file");
        let path = dir.join("w");
        std::fs::write(&path, "a").unwrap();
        assert_eq!(read(&path).unwrap(), b"a");
        std::fs::write(&path, "b").unwrap();
        assert_eq!(read(&path).unwrap(), b"b", "not spooled");
        assert!(!is_stream(&path) && !is_stream(&dir));
        assert_eq!(open(&dir.join("absent")).unwrap_err().kind(), io::ErrorKind::NotFound);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
