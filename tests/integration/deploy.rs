//! The files users deploy a sharded sweep with: the Slurm array script and
//! the Kubernetes Indexed Job manifest are shown verbatim in the README, are
//! consistent (shard count = array size = completions), and run: each task's
//! command, with the variables its scheduler sets, writes its shard, and the
//! shards' union is the one-machine sweep. (CI also submits the Slurm script
//! to a real one-node Slurm: `scripts/slurm/ci.sh`.)

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::sweep::files;
use crate::util::{Dir, LINEAR_SCENARIO, TestCommand};

const README: &str = include_str!("../../README.md");
const SLURM: &str = include_str!("../../scripts/slurm/sweep-array.sh");
const K8S: &str = include_str!("../../scripts/k8s/indexed-job.yaml");
const CHAT: &str = include_str!("../../sweeps/workloads/chat-200.jsonl");

/// Twelve runs over 40 chat requests on the linear test scenario into
/// `out/`, in `dir`: first run on one machine and moved to `whole/`.
fn plan(dir: &Dir) -> &'static str {
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", &CHAT.lines().take(40).map(|l| format!("{l}\n")).collect::<String>());
    dir.create(
        "plan.yaml",
        "name: d\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\n\
         grid: {concurrency: [null, 2, 8], rate_scale: [1.0, 3.0], seed: [1, 2]}\noutput: out\n",
    );
    TestCommand::new(&dir.path, &["-q", "--no-report", "plan.yaml"]).stdout();
    std::fs::rename(dir.join("out"), dir.join("whole")).unwrap();
    "plan.yaml"
}

#[test]
fn the_readme_shows_the_deploy_files_verbatim() {
    assert!(
        README.contains(&format!("```sh\n{SLURM}```")),
        "README: the Slurm script differs from scripts/slurm/sweep-array.sh"
    );
    assert!(
        README.contains(&format!("```yaml\n{K8S}```")),
        "README: the manifest differs from scripts/k8s/indexed-job.yaml"
    );
}

#[test]
fn the_indexed_job_is_indexed_and_its_command_writes_each_shard() {
    let job: serde_json::Value = blis_sweep::yaml::parse(K8S).unwrap();
    assert_eq!(job["apiVersion"], "batch/v1");
    assert_eq!(job["kind"], "Job");
    assert!(job["metadata"]["name"].is_string());
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed", "JOB_COMPLETION_INDEX is set only in Indexed mode");
    let completions = spec["completions"].as_u64().expect("completions: a number");
    assert!(spec["parallelism"].as_u64().is_some_and(|p| p >= 1 && p <= completions));
    let pod = &spec["template"]["spec"];
    assert!(
        matches!(pod["restartPolicy"].as_str(), Some("OnFailure" | "Never")),
        "a Job's pods must not restart Always"
    );
    let container = &pod["containers"][0];
    assert!(container["image"].is_string());
    let command: Vec<&str> = container["command"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(command[0], "blis-sweep");
    let count = command.iter().position(|&a| a == "--shard-count").map(|i| command[i + 1]);
    assert_eq!(count, Some(completions.to_string().as_str()), "--shard-count must equal completions");
    assert!(command.windows(2).any(|w| w == ["--shard", "auto"]));
    // Run it as each pod would, on a small plan in place of the manifest's.
    let dir = Dir::new("deploy-k8s");
    let sharded = plan(&dir);
    for index in 0..completions {
        let args: Vec<&str> = command[1..].iter().map(|&a| if a.ends_with(".yaml") { sharded } else { a }).collect();
        TestCommand::new(&dir.path, &args).env("JOB_COMPLETION_INDEX", &index.to_string()).stdout();
    }
    let mut union = files(&dir.join("out"));
    assert_eq!(union.remove("shards.json").as_deref(), Some(format!("{{\"shard_count\":{completions}}}\n").as_bytes()));
    same(&union, &files(&dir.join("whole")), "the pods' shards");
}

/// Asserts `union` holds `whole`'s files, naming the first that differs.
fn same(union: &BTreeMap<String, Vec<u8>>, whole: &BTreeMap<String, Vec<u8>>, what: &str) {
    let keys = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(union), keys(whole), "{what}: other files than the one-machine sweep's");
    for (name, bytes) in whole {
        assert!(union[name] == *bytes, "{what}: {name} differs from the one-machine sweep's");
    }
}

/// The script's stated count, from its `SHARDS=` line.
fn slurm_shards() -> u64 {
    let line = SLURM.lines().find_map(|l| l.strip_prefix("SHARDS=")).expect("SHARDS= in the script");
    line.trim().parse().unwrap()
}

/// Runs the Slurm script as array task `id` with Slurm's variables for an
/// array of `min..=max`.
fn slurm_task(dir: &Path, plan: &str, id: u64, (min, max): (u64, u64)) -> std::process::Output {
    let bin = Path::new(env!("CARGO_BIN_EXE_blis-sweep"));
    let path = format!("{}:{}", bin.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/slurm/sweep-array.sh");
    Command::new("bash")
        .arg(script)
        .arg(plan)
        .current_dir(dir)
        .env("PATH", path)
        .env("SLURM_ARRAY_TASK_ID", id.to_string())
        .env("SLURM_ARRAY_TASK_MIN", min.to_string())
        .env("SLURM_ARRAY_TASK_MAX", max.to_string())
        .env("SLURM_ARRAY_TASK_COUNT", (max - min + 1).to_string())
        .env("SLURM_ARRAY_TASK_STEP", "1")
        .output()
        .unwrap()
}

#[test]
fn the_slurm_script_states_its_array_and_each_task_writes_its_shard() {
    let shards = slurm_shards();
    assert!(SLURM.contains(&format!("#SBATCH --array=0-{}\n", shards - 1)), "the array must be 0..SHARDS-1");
    let dir = Dir::new("deploy-slurm");
    let sharded = plan(&dir);
    // Every task but the last as submitted; the last resubmitted alone
    // (`sbatch --array=3`: an array of one, MIN = MAX = 3).
    for id in 0..shards {
        let array = if id + 1 == shards { (id, id) } else { (0, shards - 1) };
        let out = slurm_task(&dir.path, sharded, id, array);
        assert!(out.status.success(), "task {id}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let mut union = files(&dir.join("out"));
    assert!(union.remove("shards.json").is_some());
    same(&union, &files(&dir.join("whole")), "the tasks' shards");
    // A task of an array reaching past the shards is refused.
    let out = slurm_task(&dir.path, sharded, 1, (0, shards));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("submit it as --array=0-{}", shards - 1)));
}

#[test]
fn only_a_grid_sweep_is_sharded() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (plan, why) in [
        ("sweeps/capacity-70b.yaml", "a capacity search runs in rounds"),
        ("sweeps/calibration.yaml", "a calibration plan replays its real runs on one machine"),
    ] {
        for flags in [&["--shard", "0/2"][..], &["--shard-count", "2"][..]] {
            let err = TestCommand::new(repo, &[&[plan, "-q"][..], flags].concat()).fails();
            assert!(err.contains(why), "{plan} {flags:?}: {err}");
        }
    }
}
