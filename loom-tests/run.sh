#!/usr/bin/env bash
# Runs every loom model (loom-tests/*.rs) in release mode under `--cfg loom`, with a
# preemption bound, and prints how many interleavings each model explored.
#
#   loom-tests/run.sh            # bound 3, and 2 for the models with a thread that exits
#   LOOM_MAX_PREEMPTIONS=2 loom-tests/run.sh
#   LOOM_HEAVY_PREEMPTIONS=3 loom-tests/run.sh   # bound 3 everywhere (well over 30 minutes)
#   loom-tests/run.sh state      # only the models of loom-tests/state.rs
#   loom-tests/run.sh local      # only the LocalWheel remote-handle models (loom-tests/local.rs)
#
# Why two bounds: in `mailbox.rs` and `stage.rs` a producer thread exits while the shard
# runs, and its exit retires its stage (a sweep and an announcement, about twenty atomic
# steps). At bound 3 those models explore millions of interleavings each (about 8 minutes
# for `mailbox.rs`, more than 15 for `stage.rs`); at bound 2, tens to hundreds of thousands.
# `counts.rs` too: two threads that cancel and exit while the shard runs and a third reads
# `stats()` make 2.8 million at bound 3 (about 7 minutes), 165,000 at bound 2.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="--cfg loom ${RUSTFLAGS:-}"
bound="${LOOM_MAX_PREEMPTIONS:-3}"
heavy="${LOOM_HEAVY_PREEMPTIONS:-2}"
[ "$heavy" -gt "$bound" ] && heavy="$bound"
# A separate target dir: `--cfg loom` rebuilds every crate, and must not evict the normal build.
export CARGO_TARGET_DIR="${LOOM_TARGET_DIR:-target/loom}"
light=()
heavies=()
for f in loom-tests/*.rs; do
  name=$(basename "$f" .rs)
  [ "$name" = harness ] && continue
  if [ $# -gt 0 ] && [ "$name" != "$1" ]; then continue; fi
  case "$name" in
    mailbox | stage | counts) heavies+=(--test "loom_$name") ;;
    *) light+=(--test "loom_$name") ;;
  esac
done
run() {
  echo "loom: preemption bound $1"
  shift
  # pipefail: the pipeline fails if cargo does, whatever grep finds.
  LOOM_MAX_PREEMPTIONS="$bound_now" cargo test --release --no-default-features "$@" -- --nocapture --test-threads=1 2>&1 |
    { grep --line-buffered -E 'loom model|^test |test result|panicked|FAILED|^error' || true; }
}
if [ ${#light[@]} -gt 0 ]; then bound_now=$bound run "$bound" "${light[@]}"; fi
if [ ${#heavies[@]} -gt 0 ]; then bound_now=$heavy run "$heavy" "${heavies[@]}"; fi
