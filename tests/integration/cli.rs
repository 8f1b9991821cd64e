//! The command line itself: help everywhere, pipes that close early.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::util::{Dir, TestCommand};

#[test]
fn every_command_has_help() {
    let dir = Dir::new("help");
    for args in [vec!["--help"], vec!["run", "--help"], vec!["results", "--help"]] {
        let out = TestCommand::new(&dir.path, &args).stdout();
        assert!(out.contains("Usage: blis-sweep"), "{args:?}: {out}");
    }
}

#[test]
fn a_closed_pipe_is_not_an_error() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut child = Command::new(env!("CARGO_BIN_EXE_blis-sweep"))
        .current_dir(root)
        .args(["run", "-q", "-s", "sweeps/scenarios/llama-3.1-8b-h100-tp1.yaml", "sweeps/workloads/chat-200.jsonl"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("{\"request_id\":0"));
    // The reader is dropped here, as `| head -1` would.
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
