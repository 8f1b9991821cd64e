//! Sweep output folders under stress: a sweep interrupted (SIGINT, kill -9),
//! failing to write (a read-only folder, a file too large), sharing its
//! folder with a second sweep, or re-run after its plan, workload or flags
//! changed. Each is followed by a clean re-run, after which one glob over
//! `requests/` (and `tokens/`) reads one schema and the same rows as a
//! sweep into a fresh folder, and `runs.parquet` holds the same rows (less
//! wall times).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::parquet_util::read_table;
use crate::util::{Dir, LINEAR_SCENARIO, TestCommand};

const CHAT: &str = include_str!("../../sweeps/workloads/chat-200.jsonl");

/// Twelve runs of the linear test scenario over a workload file.
const GRID: &str = "  concurrency: [null, 1, 2, 4, 8, 16]\n  rate_scale: [1.0, 2.0]";

fn plan_text(workload: &str, grid: &str) -> String {
    format!("name: t\nworkload: {{path: {workload}}}\nscenarios: [s.yaml]\ngrid:\n{grid}\noutput: out\n")
}

/// The scenario, `workload` as w.jsonl, and a plan over `grid` into out/.
fn setup(dir: &Dir, workload: &str, grid: &str) {
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", workload);
    dir.create("plan.yaml", &plan_text("w.jsonl", grid));
}

/// A table as a glob over a folder would read it: the one schema of every
/// part and the sorted union of their rows.
type Table = (String, Vec<Vec<String>>);

/// `requests`, `tokens` (when there) and `runs` (less `wall_s`) under `root`.
fn tables(root: &Path) -> BTreeMap<&'static str, Table> {
    let mut out = BTreeMap::new();
    for name in ["requests", "nodes", "tokens"] {
        let Ok(entries) = std::fs::read_dir(root.join(name)) else { continue };
        let mut schema: Option<String> = None;
        let mut rows = Vec::new();
        for e in entries {
            let path = e.unwrap().path();
            if !path.to_string_lossy().ends_with(".parquet") {
                continue;
            }
            let (s, r) = read_table(&path);
            match &schema {
                Some(first) => assert_eq!(first, &s, "{}: a second schema in {name}/", path.display()),
                None => schema = Some(s),
            }
            rows.extend(r);
        }
        rows.sort();
        out.insert(name, (schema.unwrap_or_default(), rows));
    }
    let (schema, rows) = read_table(&root.join("runs.parquet"));
    let wall = schema.split(';').position(|f| f.starts_with("wall_ms:")).unwrap();
    let rows = rows
        .into_iter()
        .map(|mut r| {
            r.remove(wall);
            r
        })
        .collect();
    out.insert("runs", (schema, rows));
    out
}

/// The tables of a sweep with `args` into a fresh folder.
fn clean_tables(workload: &str, grid: &str, args: &[&str]) -> BTreeMap<&'static str, Table> {
    let dir = Dir::new("resume-clean");
    setup(&dir, workload, grid);
    let mut all = vec!["-q"];
    all.extend(args);
    all.push("plan.yaml");
    TestCommand::new(&dir.path, &all).stdout();
    tables(&dir.join("out"))
}

fn assert_same_tables(root: &Path, clean: &BTreeMap<&'static str, Table>) {
    let got = tables(root);
    assert_eq!(got.keys().collect::<Vec<_>>(), clean.keys().collect::<Vec<_>>());
    for (name, table) in clean {
        assert!(got[name].0 == table.0, "{name}: schema {} vs clean {}", got[name].0, table.0);
        if got[name].1 != table.1 {
            let columns: Vec<&str> = table.0.split(';').collect();
            let diff = got[name].1.iter().zip(&table.1).find(|(a, b)| a != b).map(|(a, b)| {
                let k = a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(0);
                format!("first difference: {} = {} vs {}", columns.get(k).unwrap_or(&"?"), a[k], b[k])
            });
            panic!("{name}: {} rows vs {} in a clean run; {diff:?}", got[name].1.len(), table.1.len());
        }
    }
}

/// Paths under `root` a finished or failed sweep must not leave: temporary
/// files, the lock, the spooled workload.
fn leftovers(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if name.contains(".tmp") || name.contains(".lock") || name.starts_with(".workload") {
                found.push(p.display().to_string());
            }
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    found
}

fn spawn(dir: &Dir, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_blis-sweep"))
        .current_dir(&dir.path)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs of `root` with a status.json.
fn finished(root: &Path) -> usize {
    std::fs::read_dir(root.join("runs"))
        .map_or(0, |r| r.filter(|e| e.as_ref().unwrap().path().join("status.json").exists()).count())
}

/// Waits until `n` runs finished (or the child exits, or a minute passes).
fn wait_for_runs(dir: &Dir, child: &mut Child, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while finished(&dir.join("out")) < n && Instant::now() < deadline && child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Waits for `child` at most `secs`, killing it if it is still running.
fn wait_timeout(child: &mut Child, secs: u64) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn sigint_then_a_changed_workload_reruns_to_a_clean_sweep() {
    let dir = Dir::new("resume-sigint");
    setup(&dir, CHAT, GRID);
    let mut child = spawn(&dir, &["-q", "--jobs", "1", "plan.yaml"]);
    wait_for_runs(&dir, &mut child, 2);
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let status = child.wait().unwrap();
    assert!(!status.success(), "the sweep finished before SIGINT");
    let done = finished(&dir.join("out"));
    assert!((2..12).contains(&done), "{done} runs done");
    // SIGINT ends the process without unwinding: its lock stays, naming it,
    // and the next sweep takes it over because that process is gone.
    let lock = std::fs::read_to_string(dir.join("out/.blis-sweep.lock")).unwrap();
    assert!(lock.contains(&format!("\"pid\":{pid}")), "{lock}");

    // Same path, other content: the runs made from the old content are not reused.
    let fewer: String = CHAT.lines().take(150).map(|l| format!("{l}\n")).collect();
    dir.create("w.jsonl", &fewer);
    let out = TestCommand::new(&dir.path, &["plan.yaml"]).output();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("(12 run now, 0 already done)"), "{}", stderr(&out));
    assert_same_tables(&dir.join("out"), &clean_tables(&fewer, GRID, &[]));
    assert_eq!(leftovers(&dir.join("out")), Vec::<String>::new());
    assert_eq!(std::fs::read_dir(dir.join("out/runs")).unwrap().count(), 12, "runs of the old workload remain");
}

#[test]
fn kill_9_then_tokens_added_on_the_rerun_are_written() {
    let dir = Dir::new("resume-kill");
    setup(&dir, CHAT, GRID);
    let mut child = spawn(&dir, &["-q", "--jobs", "1", "plan.yaml"]);
    wait_for_runs(&dir, &mut child, 3);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let done = finished(&dir.join("out"));
    assert!((3..12).contains(&done), "{done} runs done");

    // The runs finished without tokens are redone to write them.
    let out = TestCommand::new(&dir.path, &["--tokens", "plan.yaml"]).output();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("(12 run now, 0 already done)"), "{}", stderr(&out));
    let clean = clean_tables(CHAT, GRID, &["--tokens"]);
    assert_same_tables(&dir.join("out"), &clean);
    assert_eq!(clean["tokens"].1.len(), 12 * 200);
    // Now nothing is missing, with or without --tokens.
    for args in [&["--tokens", "plan.yaml"][..], &["plan.yaml"]] {
        let out = TestCommand::new(&dir.path, args).output();
        assert!(stderr(&out).contains("(0 run now, 12 already done)"), "{}", stderr(&out));
    }
    // A run another version of the tool made is redone.
    let runs: Vec<_> = std::fs::read_dir(dir.join("out/runs")).unwrap().map(|e| e.unwrap().path()).collect();
    let status = runs[0].join("status.json");
    let text = std::fs::read_to_string(&status).unwrap();
    let version = format!("blis-sweep {}", env!("CARGO_PKG_VERSION"));
    assert!(text.contains(&version), "{text}");
    std::fs::write(&status, text.replace(&version, "blis-sweep 0.0.0")).unwrap();
    let out = TestCommand::new(&dir.path, &["--tokens", "plan.yaml"]).output();
    assert!(stderr(&out).contains("(1 run now, 11 already done)"), "{}", stderr(&out));
    assert_same_tables(&dir.join("out"), &clean);
    assert_eq!(leftovers(&dir.join("out")), Vec::<String>::new());
}

/// Whether this process can write where permissions say it cannot (root).
fn permissions_are_ignored(dir: &Dir) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let probe = dir.join("probe");
    std::fs::create_dir(&probe).unwrap();
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o555)).unwrap();
    let writable = std::fs::write(probe.join("f"), "x").is_ok();
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::remove_dir_all(&probe).unwrap();
    writable
}

#[test]
fn a_read_only_requests_folder_stops_the_sweep_and_a_rerun_completes() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Dir::new("resume-readonly");
    setup(&dir, CHAT, GRID);
    let ids: Vec<String> = TestCommand::new(&dir.path, &["plan", "plan.yaml"])
        .stdout()
        .lines()
        .skip(2)
        .map(|l| l[..16].to_owned())
        .collect();
    let requests = dir.join("out/requests");
    std::fs::create_dir_all(&requests).unwrap();
    // As root a mode does not stop writes: then the third run's part path is
    // made a directory, so writing it fails all the same.
    let root = permissions_are_ignored(&dir);
    let blocked = requests.join(format!("part-{}.parquet", ids[2]));
    if root {
        std::fs::create_dir_all(blocked.join("x")).unwrap();
    } else {
        std::fs::set_permissions(&requests, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    let out = TestCommand::new(&dir.path, &["-q", "--jobs", "1", "--results-jsonl", "plan.yaml"]).output();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("blis-sweep: out/requests/"), "{err}");
    // The sweep stopped at the error instead of simulating the other runs.
    let simulated = std::fs::read_dir(dir.join("out/runs"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().join("results.jsonl").exists())
        .count();
    assert!(simulated <= if root { 4 } else { 1 }, "{simulated} runs simulated after the error");
    assert_eq!(leftovers(&dir.join("out")), Vec::<String>::new());

    if root {
        std::fs::remove_dir_all(&blocked).unwrap();
    } else {
        std::fs::set_permissions(&requests, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    TestCommand::new(&dir.path, &["-q", "--results-jsonl", "plan.yaml"]).stdout();
    assert_same_tables(&dir.join("out"), &clean_tables(CHAT, GRID, &["--results-jsonl"]));
    assert_eq!(leftovers(&dir.join("out")), Vec::<String>::new());
}

#[test]
fn a_file_too_large_stops_the_sweep_and_a_rerun_completes() {
    let dir = Dir::new("resume-fsize");
    setup(&dir, CHAT, GRID);
    // Every step trace is larger than 64 KiB, every other file smaller: the
    // first run's trace cannot be written (EFBIG, with SIGXFSZ ignored).
    let out = Command::new("bash")
        .current_dir(&dir.path)
        .args(["-c", "ulimit -f 64; trap '' XFSZ; exec \"$0\" \"$@\""])
        .args([env!("CARGO_BIN_EXE_blis-sweep"), "-q", "--jobs", "1", "--step-trace", "plan.yaml"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("steps.jsonl") && err.contains("too large"), "{err}");
    // Nothing was recorded as finished (or failed) after the error.
    assert_eq!(finished(&dir.join("out")), 0);
    assert_eq!(leftovers(&dir.join("out")), Vec::<String>::new());

    TestCommand::new(&dir.path, &["-q", "--step-trace", "plan.yaml"]).stdout();
    assert_same_tables(&dir.join("out"), &clean_tables(CHAT, GRID, &[]));
    let traces = std::fs::read_dir(dir.join("out/runs"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().join("steps.jsonl").exists())
        .count();
    assert_eq!(traces, 12);
}

#[test]
fn a_second_sweep_into_a_busy_folder_is_refused() {
    let dir = Dir::new("resume-busy");
    // Long enough runs that the first sweep is still running when the second starts.
    let grid = "  seed: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]";
    dir.create("s.yaml", LINEAR_SCENARIO);
    let plan = format!(
        "name: t\nworkload:\n  generate: {{preset: chatbot, num_requests: 1500, rate: 20}}\n\
         scenarios: [s.yaml]\ngrid:\n{grid}\noutput: out\n"
    );
    dir.create("plan.yaml", &plan);
    let mut first = spawn(&dir, &["-q", "--jobs", "1", "plan.yaml"]);
    wait_for_runs(&dir, &mut first, 1);
    let second = TestCommand::new(&dir.path, &["-q", "plan.yaml"]).output();
    let still_running = first.try_wait().unwrap().is_none();
    let err = stderr(&second);
    assert!(still_running, "the first sweep ended before the second started; make its runs longer");
    assert_eq!(second.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("out:") && err.contains(&format!("pid {}", first.id())), "{err}");
    // The first sweep is not disturbed.
    let out = first.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(finished(&dir.join("out")), 16);
    assert_eq!(leftovers(&dir.join("out")), Vec::<String>::new());
    let reference = Dir::new("resume-busy-clean");
    reference.create("s.yaml", LINEAR_SCENARIO);
    reference.create("plan.yaml", &plan);
    TestCommand::new(&reference.path, &["-q", "plan.yaml"]).stdout();
    assert_same_tables(&dir.join("out"), &tables(&reference.join("out")));
}

#[test]
fn an_edited_plan_is_refused_then_replaced_with_force() {
    let dir = Dir::new("resume-edit");
    setup(&dir, CHAT, "  concurrency: [null, 4]");
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    // An override key adds a column: its parts could not share a glob with the old ones.
    let edited = "  concurrency: [4, 8]\n  overrides:\n    engine.max_num_seqs: [8, 16]";
    dir.create("plan.yaml", &plan_text("w.jsonl", edited));
    let err = TestCommand::new(&dir.path, &["-q", "plan.yaml"]).fails();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("blis-sweep: out: holds the results of another plan (")
            && err.trim_end().ends_with("use --force to replace them or choose another output"),
        "{err}"
    );
    // A plan grown without losing a run or a column resumes: a comment, then
    // a value added, reuse what is there.
    dir.create("plan.yaml", &format!("# capacity\n{}", plan_text("w.jsonl", "  concurrency: [null, 4]")));
    let out = TestCommand::new(&dir.path, &["plan.yaml"]).output();
    assert!(stderr(&out).contains("(0 run now, 2 already done)"), "{}", stderr(&out));
    dir.create("plan.yaml", &plan_text("w.jsonl", "  concurrency: [null, 4, 16]"));
    let out = TestCommand::new(&dir.path, &["plan.yaml"]).output();
    assert!(stderr(&out).contains("(1 run now, 2 already done)"), "{}", stderr(&out));
    assert_same_tables(&dir.join("out"), &clean_tables(CHAT, "  concurrency: [null, 4, 16]", &[]));
    // Dropping a value would drop its finished run: refused.
    dir.create("plan.yaml", &plan_text("w.jsonl", "  concurrency: [null, 16]"));
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).fails();

    dir.create("plan.yaml", &plan_text("w.jsonl", edited));
    let out = TestCommand::new(&dir.path, &["--force", "plan.yaml"]).output();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_same_tables(&dir.join("out"), &clean_tables(CHAT, edited, &[]));
    assert_eq!(std::fs::read_dir(dir.join("out/runs")).unwrap().count(), 4);
    // The folder is now the edited plan's: a plain re-run reuses everything.
    let out = TestCommand::new(&dir.path, &["plan.yaml"]).output();
    assert!(stderr(&out).contains("(0 run now, 4 already done)"), "{}", stderr(&out));
    assert_eq!(leftovers(&dir.join("out")), Vec::<String>::new());
}

#[test]
fn a_fifo_or_stdin_workload_is_read_once() {
    let dir = Dir::new("resume-fifo");
    setup(&dir, CHAT, "  concurrency: [null, 4]");
    let clean = clean_tables(CHAT, "  concurrency: [null, 4]", &[]);
    assert!(Command::new("mkfifo").arg(dir.join("w.fifo")).status().unwrap().success());
    dir.create("plan.yaml", &plan_text("w.fifo", "  concurrency: [null, 4]"));
    let fifo = dir.join("w.fifo");
    let writer = std::thread::spawn(move || {
        // Opening blocks until the sweep opens the other end.
        let mut f = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
        let _ = f.write_all(CHAT.as_bytes());
    });
    let mut child = spawn(&dir, &["-q", "plan.yaml"]);
    let status = wait_timeout(&mut child, 60);
    assert!(status.is_some_and(|s| s.success()), "the sweep over a FIFO did not finish: {status:?}");
    writer.join().unwrap();
    // The run ids hash the content, so they are those of the regular file.
    assert_same_tables(&dir.join("out"), &clean);
    assert_eq!(leftovers(&dir.join("out")), Vec::<String>::new());

    std::fs::remove_dir_all(dir.join("out")).unwrap();
    dir.create("plan.yaml", &plan_text("/dev/stdin", "  concurrency: [null, 4]"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_blis-sweep"))
        .current_dir(&dir.path)
        .args(["-q", "plan.yaml"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(CHAT.as_bytes());
    });
    let status = wait_timeout(&mut child, 60);
    feeder.join().unwrap();
    assert!(status.is_some_and(|s| s.success()), "the sweep over stdin did not finish: {status:?}");
    assert_same_tables(&dir.join("out"), &clean);
    assert_eq!(leftovers(&dir.join("out")), Vec::<String>::new());
}
