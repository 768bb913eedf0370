#!/usr/bin/env bash
# Mutation testing with cargo-mutants (https://mutants.rs): does a test fail when the code is
# broken? Each mutant is one small bug (an operator flipped, a body replaced by a default, a
# match arm deleted, a condition negated); the mutant is caught when a test fails, and it
# survives when every test still passes. The configuration is `.cargo/mutants.toml`: where
# mutants are made, and the exclusions (each one with the reason it cannot be caught).
#
#   bash .ci/mutants.sh [BASE]     a change's author runs this: it mutates only the lines
#                                  changed since BASE (default: the commit of the last recorded
#                                  run), in the library (src/) and the server (httpd/src/),
#                                  untracked files included; it fails on a survivor, and on
#                                  success it records the run in .ci/mutants/last-run.
#   bash .ci/mutants.sh --check    no build: the recorded run covers the sources as they are. It
#                                  fails if they changed since, naming the command. (Not a CI
#                                  step: a change's run is its author's, as above.)
#   bash .ci/mutants.sh --sample K/N   the whole library, one round-robin slice of N (the
#                                  library's score; survivors are listed, not a failure);
#                                  each mutant's verdict goes to .ci/mutants/slices/.
#   bash .ci/mutants.sh --rest K/N     slice K of N of what the slices kept in
#                                  .ci/mutants/slices/ have not judged (by name): the passes
#                                  that finish the whole library; verdicts go there too. The
#                                  list is dealt from the verdicts committed at the run, so
#                                  run 1/N, commit its verdicts, then 1/(N-1) and so on.
#   bash .ci/mutants.sh --tally    no build: the whole library's score over the verdicts
#                                  kept in .ci/mutants/slices/, and how many mutants no slice
#                                  has run yet (.ci/mutants_verdicts.py).
#   bash .ci/mutants.sh --check-config   CI runs this (seconds, no build): every exclusion in
#                                  .cargo/mutants.toml still names a mutant.
#
# IN_PLACE=1 (only in a clone of its own, clean): cargo-mutants mutates this tree itself
# (`--in-place`) instead of a copy per call, so only the first call builds cold (some 2.5
# minutes each on 2 cores; a slice makes six calls). It puts each file back after its mutant,
# but a run killed midway leaves one mutated: `git checkout -- src httpd/src` undoes it; and
# proptest writes the seeds that failed mutants into proptest-regressions/, to be discarded.
#
# Two passes a package, to fit a small machine: each mutant is first run against the few test
# targets that reach its file (the unit tests, and for the futures and the ambient calls their
# own integration tests: seconds); only the survivors of that pass are run against every test
# of the package (unit and integration: `--lib --tests`, about a minute), and a survivor of
# that pass is a survivor. The loom models are not run per mutant (minutes each):
# `loom-tests/mutations.py` holds the concurrency mutations they catch. A survivor that only
# a loom model catches goes in the exclusions with the model's name.
set -euo pipefail
# No pathname expansion: the globs below are cargo-mutants', passed on as they are.
set -f
cd "$(dirname "$0")/.."

VERSION=27.1.0
RECORD=.ci/mutants/last-run
SLICES=.ci/mutants/slices
OUT=target/mutants
SCOPE=(src httpd/src)

# The sources the record covers: every file under the mutated directories, and the
# configuration. Any change to them makes the record stale.
fingerprint() {
  find "${SCOPE[@]}" .cargo/mutants.toml -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
}

if [[ "${1:-}" == "--check-config" ]]; then
  # CI: no exclusion is stale. Each `exclude_re` of .cargo/mutants.toml must still name a
  # mutant the library or the server has (listed without the configuration: seconds, no
  # build); one that names none excludes nothing now and would hide the next mutant its
  # pattern happens to fit.
  if ! cargo mutants --version >/dev/null 2>&1; then
    cargo install cargo-mutants --locked --version "$VERSION"
  fi
  all=$(mktemp)
  cargo mutants --list --no-config -p shardwheel --features offload,hyper,metrics,tokio >"$all"
  cargo mutants --list --no-config -p shardwheel-httpd >>"$all"
  python3 - "$all" <<'PY'
import re, sys, tomllib
names = open(sys.argv[1]).read().splitlines()
config = tomllib.load(open(".cargo/mutants.toml", "rb"))
stale = [p for p in config.get("exclude_re", []) if not any(re.search(p, n) for n in names)]
print(f"{len(names)} mutants listed; {len(config.get('exclude_re', []))} exclusions, each names one or more" if not stale else "")
for p in stale:
    print(f"error: exclude_re {p!r} names no mutant: take it out of .cargo/mutants.toml")
sys.exit(1 if stale else 0)
PY
  rm -f "$all"
  exit 0
fi

if [[ "${1:-}" == "--check" ]]; then
  if [[ ! -f $RECORD ]]; then
    echo "error: no recorded mutation run ($RECORD): run 'bash .ci/mutants.sh'"
    exit 1
  fi
  recorded=$(sed -n 's/^fingerprint //p' "$RECORD")
  if [[ "$recorded" != "$(fingerprint)" ]]; then
    echo "error: src/ or httpd/src/ changed since the last recorded mutation run ($RECORD):"
    echo "       run 'bash .ci/mutants.sh' (it mutates only what changed) and commit its record"
    exit 1
  fi
  echo "the recorded mutation run covers today's sources:"
  sed 's/^/  /' "$RECORD"
  exit 0
fi

if [[ "${1:-}" == "--tally" ]]; then
  # The whole library's score so far: the verdicts kept in $SLICES (one file a slice run,
  # and by-hand.tsv) against the list as it stands, the exclusions applied (seconds, no
  # build, nothing copied: before the checks below, which are for the runs).
  if ! cargo mutants --version 2>/dev/null | grep -q "$VERSION"; then
    cargo install cargo-mutants --locked --version "$VERSION"
  fi
  list=$(mktemp)
  trap 'rm -f "$list"' EXIT
  cargo mutants --list --json -p shardwheel --features offload,hyper,metrics,tokio >"$list"
  mapfile -t verdict_files < <(find "$SLICES" -name '*.tsv' | sort)
  python3 .ci/mutants_verdicts.py tally "$list" "${verdict_files[@]}"
  exit 0
fi

if ! cargo mutants --version 2>/dev/null | grep -q "$VERSION"; then
  cargo install cargo-mutants --locked --version "$VERSION"
fi
mkdir -p "$OUT"
# Where each call's mutants are built and tested: a copy of the tree (the default), or the
# tree itself (IN_PLACE=1, which a tree with uncommitted changes may not use: a run killed
# midway must be undone by a checkout that loses nothing).
WHERE=(--copy-target=true)
if [[ -n "${IN_PLACE:-}" ]]; then
  if [[ -n "$(git status --porcelain -- "${SCOPE[@]}" .cargo)" ]]; then
    echo "error: IN_PLACE=1 mutates this tree, which has uncommitted changes in src/, httpd/src/ or .cargo/:"
    echo "       commit them, or run it in a clone of its own"
    exit 1
  fi
  WHERE=(--in-place)
fi
# cargo-mutants copies this tree's target/ into each scratch tree, whatever profiles it holds:
# a working tree's (tens of GiB of debug and release builds) fills the disk. A fresh clone's
# holds only what this script builds.
size=$(du -sm target 2>/dev/null | cut -f1)
if [[ -z "${IN_PLACE:-}" && ${size:-0} -gt 8192 ]]; then
  echo "error: target/ is $((size / 1024)) GiB, which each cargo-mutants call would copy: run this in a"
  echo "       fresh clone ('git clone . ../mutants && cd ../mutants && bash .ci/mutants.sh ...')"
  exit 1
fi

# kept FILE [ASKED]: the mutants a mutants.out list names (none if it is absent), less those
# an `exclude_re` of .cargo/mutants.toml matches and, given ASKED, those ASKED does not name.
# cargo-mutants 27.1 applies neither `--re` nor `exclude_re` to its struct-field deletions
# (sourcefrog/cargo-mutants#632): the second pass tested four it was not asked for, and an
# excluded one was tested. So each list is filtered again here.
kept() {
  [[ -f $1 ]] || return 0
  python3 - "$1" "${2:-}" <<'PY'
import re, sys, tomllib
patterns = tomllib.load(open(".cargo/mutants.toml", "rb")).get("exclude_re", [])
asked = set(open(sys.argv[2]).read().splitlines()) if sys.argv[2] else None
for name in open(sys.argv[1]).read().splitlines():
    if name and not any(re.search(p, name) for p in patterns) and (asked is None or name in asked):
        print(name)
PY
}

# count FILE [ASKED]: how many `kept` names.
count() { kept "$@" | grep -c . || true; }

# An anchored regex matching exactly the mutants named in a file, one a line.
names_regex() {
  python3 -c 'import re,sys; print("|".join("^" + re.escape(l.rstrip("\n")) + "$" for l in open(sys.argv[1]) if l.strip()))' "$1"
}

# run_package NAME PACKAGE FULL_TESTS ARGS...: the two passes over one package. The first
# pass runs once per entry of the global array FIRST_GROUPS, "FILES|TESTS|LIMIT": the
# mutants of the files FILES selects (cargo-mutants' `-f GLOB` and `-e GLOB`) against the
# test targets TESTS, the few that reach them, a hang cut at LIMIT seconds; the second runs
# the first's survivors against FULL_TESTS. ARGS go to both (features, the change),
# FIRST_ONLY (a global array) to the first only (a slice: the second pass takes the first's
# survivors by name). Prints a summary line; returns non-zero if a mutant survives both.
FIRST_ONLY=()
# A file of the mutants the first pass was asked for by name (`--rest`); empty: all.
FIRST_ASKED=""
# (Not `GROUPS`: that is bash's own array of the user's group ids, which ignores an assignment
# and abandons the command it is in: the groups never reached cargo-mutants.)
FIRST_GROUPS=()
run_package() {
  local name=$1 package=$2 full=$3
  shift 3
  local dir="$OUT/$name"
  rm -rf "$dir"
  mkdir -p "$dir"
  : >"$dir/first-survivors.txt"
  local total=0 caught=0 timeout=0 unviable=0 k=0 status
  for group in "${FIRST_GROUPS[@]}"; do
    local files fast limit
    IFS='|' read -r files fast limit <<<"$group"
    k=$((k + 1))
    status=0
    # The group's test targets go to the build as well as to the test run (`--cargo-arg`,
    # not after `--`, which reaches only `cargo test`'s run): a mutant's build then links
    # those few binaries, not the package's forty (the fifth slice: 9 s a build, now 3).
    local targets=()
    for word in $fast; do targets+=("--cargo-arg=$word"); done
    # A hang is caught by the timeout, LIMIT seconds: some ten times what the group's tests
    # take here unmutated, so a slow run on a loaded machine is not taken for a hang. Each
    # group tests the unmutated tree against its own targets first (seconds; none for a
    # group with no mutants): a target that fails unmutated would count every mutant caught.
    # shellcheck disable=SC2086
    cargo mutants -p "$package" "${WHERE[@]}" --no-shuffle --profile mutants --timeout "$limit" --baseline run \
      --output "$dir/first-$k" $files "$@" "${FIRST_ONLY[@]}" "${targets[@]}" || status=$?
    # Exit 2: some survived (the second pass decides); 3: some timed out (a hang the test run
    # caught); 0: all caught, or none to test.
    case $status in 0 | 2 | 3) ;; *)
      echo "error: cargo mutants failed ($status) on $package's first pass ($files)"
      return 1
      ;;
    esac
    local out="$dir/first-$k/mutants.out"
    caught=$((caught + $(count "$out/caught.txt")))
    timeout=$((timeout + $(count "$out/timeout.txt")))
    unviable=$((unviable + $(count "$out/unviable.txt")))
    total=$((total + $(count "$out/caught.txt") + $(count "$out/missed.txt") + $(count "$out/timeout.txt") + $(count "$out/unviable.txt")))
    # Survivors go on to the second pass only if asked for (`--rest` names its mutants; the
    # struct-field deletions `--re` lets through, #632, are not taken further).
    kept "$out/missed.txt" "$FIRST_ASKED" >>"$dir/first-survivors.txt"
  done
  local missed=0 by_full=0
  if [[ $(count "$dir/first-survivors.txt") -gt 0 ]]; then
    status=0
    # Their files as well as their names: the files keep out what `--re` lets through (#632).
    # The unmutated tree first, against every test, for the reason the first pass gives.
    local their_files=()
    while IFS= read -r file; do their_files+=(-f "$file"); done < <(cut -d: -f1 "$dir/first-survivors.txt" | sort -u)
    # shellcheck disable=SC2086
    cargo mutants -p "$package" "${WHERE[@]}" --no-shuffle --profile mutants --baseline run --timeout "$FULL_TIMEOUT" \
      --output "$dir/full" --re "$(names_regex "$dir/first-survivors.txt")" "${their_files[@]}" "$@" -- $full || status=$?
    case $status in 0 | 2 | 3) ;; *)
      echo "error: cargo mutants failed ($status) on $package's second pass"
      return 1
      ;;
    esac
    local full_out="$dir/full/mutants.out"
    local asked="$dir/first-survivors.txt"
    by_full=$(($(count "$full_out/caught.txt" "$asked") + $(count "$full_out/timeout.txt" "$asked")))
    missed=$(count "$full_out/missed.txt" "$asked")
    if [[ $missed -gt 0 ]]; then
      kept "$full_out/missed.txt" "$asked" >"$dir/survivors.txt"
    fi
  fi
  local line="$name: $total mutants: $((caught + by_full + timeout)) caught ($caught by the first pass's tests, $by_full more by all the package's, $timeout by a hang), $unviable unviable, $missed survived"
  echo "$line" | tee "$dir/summary.txt"
  if [[ $missed -gt 0 ]]; then
    echo "survivors ($dir/survivors.txt):"
    sed 's/^/  /' "$dir/survivors.txt"
    return 2
  fi
}

# The first pass's test targets for each part of the library: the futures' and the ambient
# calls' own tests where those are (the unit tests reach little of them), the unit tests
# elsewhere. The second pass: every unit and integration test of the package.
TIME_TESTS="--lib --test ambient --test ambient_paused --test ambient_lazy --test ambient_configure --test tokio_time_sleep --test tokio_time_timeout --test tokio_time_interval"
# LIMIT: ten times what the group's tests took unmutated here (2026-11-30: 2.4 s, 5.9 s,
# 2.2 s, 1.8 s and 1.6 s; the server's binaries 3.2 s).
LIB_GROUPS=(
  "-f src/time/**|$TIME_TESTS|30"
  "-f src/future/**|$TIME_TESTS --test sleep --test stopped --test interval --test test_clock --test full_shard --test graceful_stop|60"
  "-f src/io/**|--lib --test io_timeout|25"
  "-f src/metrics.rs -f src/lateness.rs|--lib --test metrics --test stats_storm|20"
  "-e src/time/** -e src/future/** -e src/io/** -e src/metrics.rs -e src/lateness.rs|--lib|15"
)
LIB_FULL="--lib --tests"
# The second pass's timeout: a hang there costs all of it. The library's every test takes
# some 30 s a mutant here (the fourth slice, 2026-11-30: 28 s each, test builds beside it), so 240 s
# is eight times that, room for a build beside it; it was 600 s, and two hangs of that slice
# cost 20 minutes. The server's integration tests wait out real timeouts: 600 s.
LIB_FULL_TIMEOUT=240
HTTPD_FULL_TIMEOUT=600
FULL_TIMEOUT=$LIB_FULL_TIMEOUT
HTTPD_GROUPS=("|--bins|30")
HTTPD_FULL="--bins --tests"

if [[ "${1:-}" == "--sample" || "${1:-}" == "--rest" ]]; then
  slice=${2:?"$1 K/N"}
  [[ $slice =~ ^([0-9]+)/([0-9]+)$ ]] || {
    echo "error: $1 K/N, not '$slice'"
    exit 1
  }
  k_of=${BASH_REMATCH[1]} n_of=${BASH_REMATCH[2]}
  set +e
  if [[ $1 == --sample ]]; then
    # Each group's mutants sharded apart: over K = 1..N every mutant is in one slice, and
    # each meets its group's tests first, as in a change's run.
    FIRST_ONLY=(--shard "$slice" --sharding round-robin)
    name="library-sample-${slice/\//-of-}"
    verdicts="$SLICES/library-${slice/\//-of-}.tsv"
  else
    # What the slices kept here have not judged, dealt into N (a list that shifts as
    # exclusions are added deals each `--sample` slice from a different list, so K/N over
    # all N misses some): slice K, by name.
    list=$(mktemp)
    left=$(mktemp)
    trap 'rm -f "$list" "$left"' EXIT
    cargo mutants --list --json -p shardwheel --features offload,hyper,metrics,tokio >"$list" || exit 1
    mapfile -t verdict_files < <(find "$SLICES" -name '*.tsv' | sort)
    python3 .ci/mutants_verdicts.py rest "$list" "$k_of" "$n_of" "${verdict_files[@]}" >"$left" || exit 1
    if [[ ! -s $left ]]; then
      echo "slice $slice of what no kept verdict judges is empty: nothing to run"
      exit 0
    fi
    regex=$(names_regex "$left")
    # One argument may not pass 128 KiB (Linux's MAX_ARG_STRLEN).
    if [[ ${#regex} -gt 120000 ]]; then
      echo "error: $(wc -l <"$left") mutants make a --re of ${#regex} bytes, over what one argument may hold: a larger N"
      exit 1
    fi
    echo "$(wc -l <"$left") mutants left in slice $slice"
    FIRST_ONLY=(--re "$regex")
    FIRST_ASKED=$left
    name="library-rest-${slice/\//-of-}"
    verdicts="$SLICES/library-rest-${slice/\//-of-}-at-$(git rev-parse --short=10 HEAD).tsv"
  fi
  FIRST_GROUPS=("${LIB_GROUPS[@]}")
  status=0
  run_package "$name" shardwheel "$LIB_FULL" --features offload,hyper,metrics,tokio || status=$?
  # 2: survivors, which a slice reports; anything else: the run itself failed.
  if [[ $status -ne 0 && $status -ne 2 ]]; then
    echo "error: the slice's run failed ($status); no verdicts written"
    exit 1
  fi
  echo "(a slice of the library: survivors are reported, not a failure)"
  # Each mutant's verdict by name, for the whole library's score (`--tally`): copy it into
  # the tree the run was for, and commit it. (A run stopped midway writes nothing: record
  # what it judged with `python3 .ci/mutants_verdicts.py record target/mutants/NAME
  # COMMIT`, whose unjudged are the first pass's survivors the second did not reach.)
  mkdir -p "$SLICES"
  python3 .ci/mutants_verdicts.py record "$OUT/$name" "$(git rev-parse HEAD)" >"$verdicts.new"
  if [[ ! -s "$verdicts.new" ]]; then
    echo "error: no verdicts recorded from $OUT/$name"
    exit 1
  fi
  mv "$verdicts.new" "$verdicts"
  echo "verdicts: $verdicts ($(wc -l <"$verdicts") mutants)"
  exit 0
fi

base=${1:-$(sed -n 's/^head \([0-9a-f]*\).*/\1/p' "$RECORD" 2>/dev/null || true)}
if [[ -z "$base" ]]; then
  echo "error: no base: name the commit the change starts from ('bash .ci/mutants.sh BASE')"
  exit 1
fi
git rev-parse --verify --quiet "$base^{commit}" >/dev/null || {
  echo "error: $base is not a commit here"
  exit 1
}

# The change: tracked files against BASE, and untracked ones whole (git diff leaves them out).
diff="$OUT/change.diff"
git diff --no-color "$base" -- "${SCOPE[@]}" >"$diff"
while IFS= read -r -d '' file; do
  git diff --no-color --no-index /dev/null "$file" >>"$diff" || true
done < <(git ls-files -z --others --exclude-standard -- "${SCOPE[@]}")
echo "the change since $(git log -1 --format='%h %s' "$base" | cut -c1-80): $(grep -c '^+[^+]' "$diff" || true) lines added or changed"

started=$SECONDS
failed=0
summaries=()
for name in library httpd; do
  if [[ $name == library ]]; then
    # shellcheck disable=SC2054 # one argument, "offload,hyper,metrics,tokio"
    package=shardwheel features=(--features offload,hyper,metrics,tokio) full=$LIB_FULL
    FIRST_GROUPS=("${LIB_GROUPS[@]}") FULL_TIMEOUT=$LIB_FULL_TIMEOUT
  else
    package=shardwheel-httpd features=() full=$HTTPD_FULL
    FULL_TIMEOUT=$HTTPD_FULL_TIMEOUT
    FIRST_GROUPS=("${HTTPD_GROUPS[@]}")
  fi
  if [[ -z "$(cargo mutants -p "$package" --list --in-diff "$diff" "${features[@]}" 2>/dev/null)" ]]; then
    summaries+=("$name: no mutant in the change")
    echo "${summaries[-1]}"
    continue
  fi
  status=0
  run_package "$name" "$package" "$full" --in-diff "$diff" "${features[@]}" || status=$?
  [[ $status -eq 0 ]] || failed=1
  summaries+=("$(cat "$OUT/$name/summary.txt" 2>/dev/null || echo "$name: failed")")
done

if [[ $failed -ne 0 ]]; then
  echo
  echo "error: mutants survived. For each, add a test that fails with it (the class of bug it"
  echo "       is, not just this instance), or, for an equivalent mutant, list it in"
  echo "       .cargo/mutants.toml's exclude_re with the reason; then run this again."
  exit 1
fi

mkdir -p "$(dirname "$RECORD")"
head=$(git rev-parse HEAD)
if [[ -n "$(git status --porcelain -- "${SCOPE[@]}" .cargo/mutants.toml)" ]]; then
  head="$head (and uncommitted changes)"
fi
{
  echo "fingerprint $(fingerprint)"
  echo "base $(git rev-parse "$base")"
  echo "head $head"
  echo "date $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "took $((SECONDS - started)) s"
  printf '%s\n' "${summaries[@]}"
} >"$RECORD"
echo
echo "recorded in $RECORD:"
cat "$RECORD"
