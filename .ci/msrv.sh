#!/usr/bin/env bash
# The declared MSRV compiles: installs the toolchain Cargo.toml's `rust-version` names (a
# minimal profile) and checks the library on it with no features, each feature, and all of
# them, warnings denied. Its own target dir, so the current toolchain's builds are untouched.
# Run from anywhere: `bash .ci/msrv.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml | head -n 1)
if [ -z "$version" ]; then
  echo "error: no rust-version in Cargo.toml"
  exit 1
fi
if ! cargo "+$version" --version >/dev/null 2>&1; then
  rustup toolchain install "$version" --profile minimal
fi
cargo "+$version" --version

export CARGO_TARGET_DIR=target/msrv RUSTFLAGS="${RUSTFLAGS:-} -D warnings"
features=$(cargo "+$version" metadata --no-deps --format-version 1 |
  python3 -c 'import json, sys
pkg = next(p for p in json.load(sys.stdin)["packages"] if p["name"] == "shardwheel")
print(" ".join(f for f in pkg["features"] if f != "default"))')

check() {
  echo "--> cargo +$version check -p shardwheel --lib $*"
  cargo "+$version" check -p shardwheel --lib "$@"
}
check --no-default-features
for feature in $features; do
  check --no-default-features --features "$feature"
done
check --all-features
echo "the library compiles on Rust $version with no features, each of ($features), and all"
