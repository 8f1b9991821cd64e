//! Input files that cannot be read twice (a FIFO, `/dev/stdin` on a pipe, a
//! character device), made readable as often as a command needs: what is
//! read from the stream is copied into an unnamed temporary file (`TMPDIR`,
//! see [`crate::atomic::unnamed_temp_file`]) as it is read, and every open
//! of the same file, then and later, in any thread, reads from its start:
//! the copy as far as it goes, then more of the stream (copied in turn).
//! Only what readers ask for is copied, so a reader's own limits (the
//! workload reader's 32 MiB line) stop an endless stream (`/dev/zero`)
//! before it fills the disk.
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
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A stream's device and inode: its identity whatever the name it is opened by.
type StreamId = (u64, u64);

/// The streams opened so far, with their copies.
static SPOOLS: Mutex<Vec<(StreamId, Arc<Spool>)>> = Mutex::new(Vec::new());

/// A stream and its copy so far.
#[derive(Debug)]
pub(crate) struct Spool {
    /// The temporary file's name, for messages.
    name: std::path::PathBuf,
    state: Mutex<SpoolState>,
}

#[derive(Debug)]
struct SpoolState {
    copy: File,
    /// Bytes copied so far.
    copied: u64,
    /// The stream, until it has been read to its end.
    stream: Option<File>,
}

impl Spool {
    /// Reads into `buf` from byte `pos`: from the copy, or, at its end, from
    /// the stream (copying what comes).
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if pos < state.copied {
            let most = (state.copied - pos).min(buf.len() as u64) as usize;
            return state.copy.read_at(&mut buf[..most], pos);
        }
        let SpoolState { copy, copied, stream } = &mut *state;
        let Some(from) = stream else { return Ok(0) };
        let n = from.read(buf)?;
        if n == 0 {
            *stream = None;
            return Ok(0);
        }
        copy.write_all_at(&buf[..n], *copied)
            .map_err(|e| io::Error::new(e.kind(), format!("copying it to {}: {e}", self.name.display())))?;
        *copied += n as u64;
        // (A reader past the copy's end, which cannot be: readers start at 0
        // and read in order, would get the bytes at the copy's end.)
        Ok(n)
    }
}

/// An opened input: the file itself, or a reader of a stream through its copy.
#[derive(Debug)]
pub(crate) enum Input {
    /// A regular file (or a directory, which fails on read as it would).
    File(File),
    /// A stream, read from `pos` (readers in several threads never share an offset).
    Spooled {
        /// The stream and its copy.
        spool: Arc<Spool>,
        /// The next byte to read.
        pos: u64,
    },
}

impl Read for Input {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Input::File(f) => f.read(buf),
            Input::Spooled { spool, pos } => {
                let n = spool.read_at(buf, *pos)?;
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

/// Opens `path` for reading; a stream is opened once and read through its
/// copy by every open. Errors are the OS's (the caller names the path), or
/// say the copy failed.
pub(crate) fn open(path: &Path) -> io::Result<Input> {
    // (metadata follows symlinks: /dev/stdin → a pipe is a pipe; it never
    // blocks, unlike opening a FIFO.)
    let meta = std::fs::metadata(path)?;
    if meta.is_file() || meta.is_dir() {
        return File::open(path).map(Input::File);
    }
    let key = (meta.dev(), meta.ino());
    let mut spools = SPOOLS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, spool)) = spools.iter().find(|(k, _)| *k == key) {
        return Ok(Input::Spooled { spool: Arc::clone(spool), pos: 0 });
    }
    let stream = File::open(path)?;
    let (name, copy) = crate::atomic::unnamed_temp_file()?;
    let spool = Arc::new(Spool { name, state: Mutex::new(SpoolState { copy, copied: 0, stream: Some(stream) }) });
    spools.push((key, Arc::clone(&spool)));
    Ok(Input::Spooled { spool, pos: 0 })
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
    fn an_endless_stream_is_copied_only_as_far_as_it_is_read() {
        let mut zero = open(Path::new("/dev/zero")).unwrap();
        let mut buf = vec![1u8; 1 << 16];
        zero.read_exact(&mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        let mut again = open(Path::new("/dev/zero")).unwrap();
        let mut more = vec![1u8; 1 << 17];
        again.read_exact(&mut more).unwrap();
        assert!(more.iter().all(|&b| b == 0));
        let Input::Spooled { spool, .. } = &again else { panic!("a device is spooled") };
        assert_eq!(spool.state.lock().unwrap().copied, 1 << 17);
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
