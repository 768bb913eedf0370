#!/usr/bin/env bash
# Memory checking of the crate's `unsafe` code (no Miri on stable): runs the tests that
# exercise it under valgrind's memcheck, which must report zero errors and no definite leaks.
#
# The `unsafe` checked here lives in `src/entry/` (taking the task out of its cell after the
# winning CAS; the cell pool in `src/entry/pool/`: slots carved from pages, freed locally or
# onto a page's remote stack, pages abandoned by exiting threads and released by their last
# free: the `--lib` unit tests and `pool`), `src/stage.rs` (raw entry references in a stage's ring), `src/counts.rs` and
# `src/staging.rs` (a thread's counts slot); every schedule, cancel, expiry and stop goes
# through them; `src/periodic.rs` (a series' waiting-run cell: `repeating`) and
# `src/future/with_timeout.rs` (pin projection: `stopped`, `test_clock`); `src/clock/tsc/`
# (`rdtsc`, `lfence`: its unit tests, in the library's). The timing tests are left out:
# valgrind runs code some fifty times slower, so their lateness bounds would not hold.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v valgrind >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq valgrind >/dev/null
fi
valgrind --version

build() { cargo test --release --no-default-features --no-run --message-format=json "$@" 2>/dev/null |
  python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])'; }

run() {
  local bin=$1; shift
  echo "--- valgrind $(basename "$bin") $*"
  PROPTEST_CASES=16 valgrind --quiet --error-exitcode=99 --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
    --fair-sched=yes "$bin" --test-threads=2 -q "$@"
}

# Valgrind answers CPUID from a CPU model of its own, not the host's: the test that checks
# the invariant-TSC bit against the host kernel's `/proc/cpuinfo` cannot hold under it.
run "$(build --lib)" --skip the_invariant_tsc_bit_is_the_one_the_kernel_reads
for t in cancel stop reset max_pending duration_max stage torture leaks pool repeating stopped test_clock; do
  run "$(build --test "$t")"
done
echo "valgrind: no errors"
