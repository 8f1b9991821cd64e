#!/usr/bin/env bash
# The long fuzzing run of issue 9: N mutated inputs (default 1,000,000) over
# every parser and importer, session pools, capacity searches, report
# folders and TraceV2 round trips (tests/integration/fuzz.rs), in release,
# under a 4 GiB address-space limit so a runaway allocation aborts instead of
# swapping. Prints one line per target: inputs, share accepted, panics, the
# seconds spent in it and the slowest input. Exit status 0 only when nothing
# panicked or aborted. The scratch folders go to /dev/shm when there is one
# (every input is written to a file and restored: on a busy shared disk that,
# not the library, took most of the time).
#   bash scripts/fuzz.sh [N] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
export BLIS_FUZZ_INPUTS="${1:-1000000}" BLIS_FUZZ_SEED="${2:-1}"
cargo test --release --test integration --no-run --quiet
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
ulimit -v 4194304
exec cargo test --release --quiet --test integration fuzz_every_parser_long -- --ignored --nocapture
