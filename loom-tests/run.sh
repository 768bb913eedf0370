#!/usr/bin/env bash
# Runs every loom model (loom-tests/*.rs) in release mode under `--cfg loom`, with a
# preemption bound, and prints how many interleavings each model explored.
#
#   loom-tests/run.sh            # bound 3 (the default, and what CI runs)
#   LOOM_MAX_PREEMPTIONS=2 loom-tests/run.sh
#   loom-tests/run.sh state      # only the models of loom-tests/state.rs
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="--cfg loom ${RUSTFLAGS:-}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
# A separate target dir: `--cfg loom` rebuilds every crate, and must not evict the normal build.
export CARGO_TARGET_DIR="${LOOM_TARGET_DIR:-target/loom}"
tests=()
for f in loom-tests/*.rs; do
  name=$(basename "$f" .rs)
  [ "$name" = harness ] && continue
  if [ $# -gt 0 ] && [ "$name" != "$1" ]; then continue; fi
  tests+=(--test "loom_$name")
done
echo "loom: preemption bound $LOOM_MAX_PREEMPTIONS"
# pipefail: the pipeline fails if cargo does, whatever grep finds.
cargo test --release --no-default-features "${tests[@]}" -- --nocapture --test-threads=1 2>&1 |
  { grep --line-buffered -E 'loom model|^test |test result|panicked|FAILED|^error' || true; }
