#!/usr/bin/env bash
# Miri over the unit tests of the crate's unsafe code (docs/verification.md, "Miri"): the
# cell pool's pages and remote stacks (entry::pool), the entry cell (entry::), the biased
# count (counts::), the stage ring (stage::), the state word (state::), the wheel and its slab
# (wheel::), LocalWheel's slots (local::), the biased shard handle (shard::handle::), a Sleep's
# tagged slot and its cell (future::sleep::). Stacked Borrows with strict provenance over all
# of them, then Tree Borrows over the cell, the pool (whose pages are found by masking a
# slot's address), the stage ring and the Sleep's slot.
# Skipped: the proptest models (`*_matches_model`: proptest reads the working directory,
# which Miri's isolation refuses, and thousands of cases are hours under Miri).
# Under Miri a pool page is 16 KiB (`src/entry/pool/page.rs`), so its tests fill pages fast.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo +nightly miri --version >/dev/null 2>&1; then
  rustup component add --toolchain nightly miri rust-src
fi
cargo +nightly miri setup

# Stacked Borrows (Miri's default), then Tree Borrows; a pointer made from an integer has
# no provenance under either. The timing test of LocalWheel's notifier is skipped: Miri's
# clock runs with its instructions, so "at most a second" passes while it runs. So is the
# remote cancel on every page of LocalWheel's directory: 12,288 arms took 104 s under Miri
# (2026-11-29), for the directory's index arithmetic, which is safe code (`OnceLock`s); the
# other remote tests take Miri through the same code on its first page.
MIRIFLAGS="-Zmiri-strict-provenance" cargo +nightly miri test -p shardwheel --lib -- \
  entry:: counts:: stage:: state:: wheel:: local:: shard::handle:: future::sleep:: \
  --skip matches_model --skip notifier_runs_only_for_an_earlier_arm_while_the_owner_sleeps \
  --skip a_remote_cancel_finds_its_timer_on_every_page

MIRIFLAGS="-Zmiri-tree-borrows -Zmiri-strict-provenance" cargo +nightly miri test -p shardwheel --lib -- \
  entry:: stage:: future::sleep::
