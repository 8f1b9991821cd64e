//! The CLI's side of [`crate::atomic`]: the same output files, with the
//! path in front of every error; and the check, before a command writes
//! anything, that no two of its outputs are one file and that no output is
//! one of its inputs.

use std::path::{Path, PathBuf};

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

/// [`crate::atomic::commit_all`]: every output of a command in place, or
/// none; the error naming the file that failed.
pub(crate) fn commit_all(files: Vec<AtomicFile>) -> anyhow::Result<()> {
    crate::atomic::commit_all(files).map_err(|(path, e)| anyhow::Error::new(e).context(path.display().to_string()))
}

/// Writes `bytes` to `path` atomically, the error naming `path`.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    crate::atomic::write_file(path, bytes).with_context(|| path.display().to_string())
}

/// What a command writes to when no file is given.
pub(crate) const STDOUT: &str = "/dev/stdout";

/// A file a command reads or writes, and the flag that names it.
pub(crate) struct Named<'a> {
    pub(crate) flag: &'a str,
    pub(crate) path: &'a Path,
    /// The flag is not given and the output goes to stdout.
    pub(crate) stdout_default: bool,
}

impl<'a> Named<'a> {
    /// `path`, given with `flag`.
    pub(crate) fn given(flag: &'a str, path: &'a Path) -> Named<'a> {
        Named { flag, path, stdout_default: false }
    }

    /// Stdout, where the output goes without `flag`.
    pub(crate) fn stdout(flag: &'a str) -> Named<'a> {
        Named { flag, path: Path::new(STDOUT), stdout_default: true }
    }

    /// The file, for a message.
    fn what(&self) -> String {
        if self.stdout_default { "stdout (not given)".to_owned() } else { self.path.display().to_string() }
    }
}

/// Which file `path` is: its device and inode when it exists (symlinks,
/// `/dev/stdout` and hard links resolved by the kernel), else the path
/// with its directory made canonical and a dangling link followed; `None`
/// when neither can be told (a directory that does not exist: the command
/// reports it when it writes).
#[derive(Debug, PartialEq, Eq)]
enum Identity {
    Inode(u64, u64),
    Path(PathBuf),
}

fn identity(path: &Path) -> Option<Identity> {
    use std::os::unix::fs::MetadataExt;
    if let Ok(m) = std::fs::metadata(path) {
        return Some(Identity::Inode(m.dev(), m.ino()));
    }
    let path = crate::atomic::resolve_symlinks(path).ok()?;
    let name = path.file_name()?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Some(Identity::Path(std::fs::canonicalize(dir).ok()?.join(name)))
}

/// Refuses, with a one-line error naming both flags, two outputs that are
/// one file (`-o X --metrics X`, the same file through a link or another
/// spelling, two outputs on one stdout) and an output that is one of the
/// inputs (the input would be replaced by the output). `/dev/null` may take
/// any number of outputs; an input and an output may share what is not a
/// regular file (stdin and stdout on one terminal).
pub(crate) fn check_distinct(outputs: &[Named<'_>], inputs: &[Named<'_>]) -> anyhow::Result<()> {
    let null = identity(Path::new("/dev/null"));
    let outs: Vec<_> = outputs.iter().map(|o| (o, identity(o.path))).collect();
    for (k, (b, id)) in outs.iter().enumerate() {
        let Some(id) = id else { continue };
        if Some(id) == null.as_ref() {
            continue;
        }
        if let Some((a, _)) = outs[..k].iter().find(|(_, other)| other.as_ref() == Some(id)) {
            anyhow::bail!(
                "{}: {} is the same file as {} ({}): give each output its own file",
                b.flag,
                b.what(),
                a.flag,
                a.what()
            );
        }
        let regular = std::fs::metadata(b.path).is_ok_and(|m| m.is_file());
        if let Some(input) = inputs.iter().find(|i| regular && identity(i.path).as_ref() == Some(id)) {
            anyhow::bail!(
                "{}: {} is the same file as the input {} ({}): writing it would replace the input",
                b.flag,
                b.what(),
                input.flag,
                input.what()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named<'a>(flag: &'a str, path: &'a Path) -> Named<'a> {
        Named::given(flag, path)
    }

    #[test]
    fn one_file_under_two_names_is_refused() {
        let dir = std::env::temp_dir().join(format!("blis-cli-atomic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("in.jsonl"), "x").unwrap();
        std::os::unix::fs::symlink("in.jsonl", dir.join("link")).unwrap();
        std::os::unix::fs::symlink("new.json", dir.join("dangling")).unwrap();
        let p = |name: &str| dir.join(name);
        let (a, b, c) = (p("new.json"), p("sub/../new.json"), p("dangling"));
        let e = check_distinct(&[named("-o", &a), named("--metrics", &b)], &[]).unwrap_err().to_string();
        assert!(e.starts_with("--metrics: ") && e.contains("same file as -o"), "{e}");
        assert!(check_distinct(&[named("-o", &a), named("--step-trace", &c)], &[]).is_err());
        let (input, link) = (p("in.jsonl"), p("link"));
        let e = check_distinct(&[named("-o", &link)], &[named("WORKLOAD", &input)]).unwrap_err().to_string();
        assert!(e.contains("-o: ") && e.contains("the input WORKLOAD"), "{e}");
        let null = Path::new("/dev/null");
        assert!(check_distinct(&[named("-o", null), named("--metrics", null)], &[named("W", null)]).is_ok());
        assert!(check_distinct(&[named("-o", &a), named("--metrics", &input)], &[]).is_ok());
        let e = check_distinct(&[named("-o", Path::new(STDOUT)), Named::stdout("--metrics")], &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--metrics: stdout (not given) is the same file as -o (/dev/stdout): give each output its own file"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
