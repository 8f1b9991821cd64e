#!/usr/bin/env bash
# CI: a sweep run as a Slurm array on a one-node cluster on this machine
# (scripts/slurm/one-node.sh), submitted with the script the README shows
# (scripts/slurm/sweep-array.sh, unchanged), against the same plan run on one
# machine:
#   1. `sbatch --array=0-3` of the array script; task 2 is cancelled (scancel)
#      after its first run and the others finish: the parent's report names
#      shard=2 as not written yet;
#   2. task 2 resubmitted alone (`sbatch --array=2`, which Slurm tells it is an
#      array of one): it resumes shard 2 of 4;
#   3. the shards' union is byte-identical to the one-machine sweep
#      (scripts/check-shard-union.py) and the parent's report is whole;
#   4. a stepped array (`--array=0-6:2`) is refused by every task.
# Usage: BIN=target/release/blis-sweep PY=target/ci-venv/bin/python bash scripts/slurm/ci.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
BIN=$(cd "$(dirname "${BIN:-target/release/blis-sweep}")" && pwd)/$(basename "${BIN:-blis-sweep}")
PY=${PY:-target/ci-venv/bin/python}
if ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q slurm-wlm munge >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q slurm-wlm munge >/dev/null; }
fi
work=$(mktemp -d)
trap 'bash scripts/slurm/one-node.sh stop "$work/slurm"' EXIT
eval "$(bash scripts/slurm/one-node.sh start "$work/slurm")"
export PATH="$(dirname "$BIN"):$PATH"

# Eight runs of ~3 s each (400,000 generated chat requests), two a shard.
out=$repo/results/slurm-array whole=$repo/results/slurm-whole
rm -rf "$out" "$whole"
plan() {
    cat <<PLAN
name: slurm-ci
workload:
  generate: {preset: chatbot, rate: 60, num_requests: 400000}
scenarios: [scenarios/llama-3.1-8b-h100-tp1.yaml]
grid: {seed: [1, 2], concurrency: [null, 64], rate_scale: [1.0, 1.5]}
output: $1
PLAN
}
plan "$out" > sweeps/.ci-slurm.yaml
plan "$whole" > sweeps/.ci-slurm-whole.yaml
blis-sweep -q --no-report sweeps/.ci-slurm-whole.yaml

cd "$work"
job=$(sbatch --parsable --array=0-3 "$repo/scripts/slurm/sweep-array.sh" "$repo/sweeps/.ci-slurm.yaml")
runs_done() { ls "$out/shard=$1/runs/"*/status.json 2>/dev/null | wc -l; }
for _ in $(seq 3000); do
    [ "$(runs_done 2)" -ge 1 ] && break
    sleep 0.1
done
scancel "${job}_2"
echo "slurm: cancelled task 2 with $(runs_done 2) of its 2 runs done"
test "$(runs_done 2)" -lt 2
# The rest of the array (srun's --dependency would do; polling squeue is plainer).
while squeue -h -j "$job" 2>/dev/null | grep -q .; do sleep 0.5; done
test "$(runs_done 0)" -eq 2 && test "$(runs_done 1)" -eq 2 && test "$(runs_done 3)" -eq 2
blis-sweep report "$out" >/dev/null
grep -q "shard=2 not written yet" "$out/report.html"

sbatch --wait --array=2 "$repo/scripts/slurm/sweep-array.sh" "$repo/sweeps/.ci-slurm.yaml" >/dev/null
test "$(runs_done 2)" -eq 2
cd "$repo"
"$PY" scripts/check-shard-union.py "$out" "$whole"
blis-sweep report "$out" >/dev/null
grep -q "A sharded sweep: 4 shards" "$out/report.html"
! grep -q "not written yet" "$out/report.html"

# A stepped array reaches past the 4 shards: every task refuses, none writes.
stepped=$repo/results/slurm-stepped
rm -rf "$stepped"
plan "$stepped" > sweeps/.ci-slurm-stepped.yaml
cd "$work"
stepped_job=$(sbatch --parsable --wait --array=0-6:2 "$repo/scripts/slurm/sweep-array.sh" "$repo/sweeps/.ci-slurm-stepped.yaml") || true
cd "$repo"
for task in 0 2 4 6; do
    f=$work/slurm-${stepped_job}_$task.out
    grep -q "submit it as --array=0-3" "$f" || { echo "slurm: task $task of --array=0-6:2 was not refused:"; cat "$f"; exit 1; }
done
test ! -e "$stepped/shard=0"
rm -f sweeps/.ci-slurm.yaml sweeps/.ci-slurm-whole.yaml sweeps/.ci-slurm-stepped.yaml
echo "slurm: array, cancelled and resubmitted task, stepped array: ok"
