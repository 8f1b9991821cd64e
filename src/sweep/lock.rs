//! The output folder's owner: `.blis-sweep.lock`, created with `create_new`
//! and holding the owner's pid, host and process start time, removed when the
//! sweep ends (a guard, so error returns remove it too). A second sweep into
//! the folder finds it and stops with one line naming the folder and the pid,
//! instead of both deleting each other's temporary files.
//!
//! A process killed by a signal (SIGINT, `kill -9`) leaves its lock behind.
//! On Linux a lock whose process is gone (no `/proc/<pid>`, or a `/proc/<pid>`
//! that started at another time, i.e. a reused pid, or our own pid, as after
//! a container restart) is stale and is taken over. A lock written on another
//! host (a shared volume) cannot be checked from here and counts as held; its
//! message says which file to remove. Taking over renames the stale lock
//! aside and checks that it was the one judged stale before creating ours, so
//! two sweeps taking over at once do not both win.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::error::SweepError;
use super::output_dir::io_err;

/// The lock file's name, in the folder it guards.
pub(crate) const LOCK_NAME: &str = ".blis-sweep.lock";

/// Who holds a lock.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Owner {
    pid: u32,
    host: String,
    /// Start time of the process, in clock ticks after boot (`/proc/<pid>/stat`
    /// field 22); 0 where unknown.
    start: u64,
}

impl Owner {
    fn current() -> Owner {
        let pid = std::process::id();
        Owner { pid, host: hostname(), start: start_time(pid).unwrap_or(0) }
    }

    /// Whether the process is known to be gone.
    fn is_gone(&self, me: &Owner) -> bool {
        if self.host != me.host || !Path::new("/proc/self").exists() {
            return false;
        }
        if self.pid == me.pid {
            return true;
        }
        match start_time(self.pid) {
            None => !Path::new(&format!("/proc/{}", self.pid)).exists(),
            Some(start) => self.start != 0 && start != self.start,
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_default()
}

/// Field 22 of `/proc/<pid>/stat`; the command name (field 2) is in
/// parentheses and may hold spaces, so fields are counted after its `)`.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The held lock; dropping it removes the file (if it is still ours).
#[derive(Debug)]
pub(crate) struct OutputLock {
    path: PathBuf,
    token: String,
}

impl OutputLock {
    /// Takes the lock of `dir` (created if missing), or says who holds it.
    pub(crate) fn acquire(dir: &Path) -> Result<OutputLock, SweepError> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let path = dir.join(LOCK_NAME);
        let me = Owner::current();
        let token = serde_json::to_string(&me).map_err(|e| io_err(&path)(std::io::Error::other(e)))?;
        let busy = |owner: Option<Owner>| {
            let (pid, host) = owner.map_or_else(
                || ("unknown".to_owned(), String::new()),
                |o| (o.pid.to_string(), if o.host == me.host { String::new() } else { format!(" on {}", o.host) }),
            );
            SweepError::Busy { dir: dir.display().to_string(), pid, host, lock: path.display().to_string() }
        };
        // A few rounds: each lost race (a lock released or taken over
        // meanwhile) starts over.
        for _ in 0..8 {
            match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(mut file) => {
                    if let Err(e) = file.write_all(format!("{token}\n").as_bytes()) {
                        let _ = std::fs::remove_file(&path);
                        return Err(io_err(&path)(e));
                    }
                    return Ok(OutputLock { path, token });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err(&path)(e)),
            }
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(&path)(e)),
            };
            let owner: Option<Owner> = serde_json::from_str(text.trim()).ok();
            let stale = match &owner {
                Some(o) => o.is_gone(&me),
                // Empty: its owner died between creating and writing it, or is
                // there right now; only an old one is taken to be the former.
                None => std::fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().is_ok_and(|age| age.as_secs() > 10)),
            };
            if !stale {
                return Err(busy(owner));
            }
            let aside = dir.join(format!("{LOCK_NAME}.stale-{}", me.pid));
            match std::fs::rename(&path, &aside) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(&path)(e)),
            }
            // Another sweep may have replaced the stale lock with its own
            // between our read and our rename: then put that one back.
            if std::fs::read_to_string(&aside).is_ok_and(|t| t != text) {
                let _ = std::fs::hard_link(&aside, &path);
            }
            let _ = std::fs::remove_file(&aside);
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        Err(busy(serde_json::from_str(text.trim()).ok()))
    }
}

impl Drop for OutputLock {
    fn drop(&mut self) {
        // Only our own: a lock judged stale and taken over is another's now.
        if std::fs::read_to_string(&self.path).is_ok_and(|t| t.trim() == self.token) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_is_exclusive_and_a_dead_owner_is_taken_over() {
        let dir = std::env::temp_dir().join(format!("blis-sweep-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let lock = OutputLock::acquire(&dir).unwrap();
        // Our own pid in a lock we do not hold reads as stale; a live other
        // process (pid 1, same host and start) as busy.
        let me = Owner::current();
        assert!(Owner { pid: me.pid, ..me.clone() }.is_gone(&me));
        if let Some(start) = start_time(1) {
            assert!(!Owner { pid: 1, host: me.host.clone(), start }.is_gone(&me));
            assert!(Owner { pid: 1, host: me.host.clone(), start: start + 1 }.is_gone(&me));
        }
        assert!(!Owner { pid: 1, host: "elsewhere".to_owned(), start: 0 }.is_gone(&me));
        drop(lock);
        assert!(!dir.join(LOCK_NAME).exists());
        // A lock left by a process that is gone is taken over.
        let dead = Owner { pid: u32::MAX - 1, host: me.host.clone(), start: 5 };
        std::fs::write(dir.join(LOCK_NAME), serde_json::to_string(&dead).unwrap()).unwrap();
        let lock = OutputLock::acquire(&dir).unwrap();
        assert!(std::fs::read_to_string(dir.join(LOCK_NAME)).unwrap().contains(&format!("\"pid\":{}", me.pid)));
        drop(lock);
        // One held elsewhere is not.
        let remote = Owner { pid: 7, host: "elsewhere".to_owned(), start: 5 };
        std::fs::write(dir.join(LOCK_NAME), serde_json::to_string(&remote).unwrap()).unwrap();
        let err = OutputLock::acquire(&dir).unwrap_err().to_string();
        assert!(err.contains("pid 7 on elsewhere"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
