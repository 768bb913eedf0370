#!/usr/bin/env bash
# The published package is the library: its sources, README, licence texts and examples.
# Checks that `cargo package --list` holds no tests, loom models, benchmarks or CI files, that
# the licence texts are in it, and that `cargo publish --dry-run` (packs, builds the packed
# crate, uploads nothing) passes with no warning but cargo's notes that the repository's
# test and bench targets are left out (rust-lang/cargo#14290: cargo warns for every target
# whose file `include` leaves out, and offers no way to say that is meant), and that the
# packaged examples build from the package alone.
#
#   bash .ci/package.sh       (needs the crates.io index: `cargo publish --dry-run` resolves
#                              the packed manifest against it)
set -euo pipefail
cd "$(dirname "$0")/.."

list=$(cargo package -p shardwheel --list --allow-dirty 2>/dev/null)
if grep -E '^(tests|loom-tests|benches|\.ci|docs|peers|sim|httpd|proptest-regressions)/' <<<"$list"; then
  echo "error: the package holds the files above (tests, loom models, benches, CI or other packages)"
  exit 1
fi
for f in README.md LICENSE-MIT LICENSE-APACHE src/lib.rs; do
  grep -qx "$f" <<<"$list" || { echo "error: the package lacks $f"; exit 1; }
done

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# --allow-dirty: CI runs on a working tree; nothing is uploaded either way.
cargo publish --dry-run -p shardwheel --allow-dirty 2>&1 | tee "$log" | grep -vE '^ +(Compiling|Checking|Downloaded|Downloading)' || true
grep -q 'aborting upload due to dry run' "$log" || { echo "error: cargo publish --dry-run failed"; exit 1; }
if grep '^warning' "$log" |
  grep -vE '^warning: ignoring (test|benchmark|example) `[^`]+` as `[^`]+` is not included in the published package$' |
  grep -v '^warning: aborting upload due to dry run$'; then
  echo "error: cargo publish --dry-run warned (above)"
  exit 1
fi

# The examples build from the package alone (their dev-dependencies are on crates.io; the
# path-only ones are stripped from the packed manifest): the unpacked copy `cargo package`
# verified, built outside the workspace, sharing its target dir.
target=$(realpath "${CARGO_TARGET_DIR:-target}")
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
copy=$(mktemp -d)
trap 'rm -f "$log"; rm -rf "$copy"' EXIT
cp -r "$target/package/shardwheel-$version" "$copy/"
(cd "$copy/shardwheel-$version" && CARGO_TARGET_DIR="$target" cargo build --examples)
echo "package: $(grep -c . <<<"$list") files; cargo publish --dry-run passes; the examples build from it"
