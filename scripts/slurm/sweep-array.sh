#!/bin/bash
#SBATCH --job-name=blis-sweep
#SBATCH --array=0-3
#SBATCH --output=slurm-%A_%a.out
# One shard of a sweep per array task, all writing under the plan's output
# folder on a shared filesystem (OUTPUT/shard=I/); report the whole sweep
# afterwards with `blis-sweep report OUTPUT`.
#
#   sbatch --cpus-per-task=32 scripts/slurm/sweep-array.sh PLAN.yaml
#   sbatch --array=2 scripts/slurm/sweep-array.sh PLAN.yaml   # rerun task 2 alone: it resumes shard 2
#
# SHARDS is the sweep's number of shards and must match --array (0..SHARDS-1).
# It is stated here, not read from Slurm: a task resubmitted alone sees an
# array of one. blis-sweep records it in OUTPUT/shards.json and refuses a task
# of another count, or an array reaching past it.
set -euo pipefail
SHARDS=4
plan=${1:?usage: sbatch scripts/slurm/sweep-array.sh PLAN.yaml [blis-sweep flags]}
shift
exec blis-sweep "$plan" --shard auto --shard-count "$SHARDS" --jobs "${SLURM_CPUS_PER_TASK:-1}" --no-report -q "$@"
