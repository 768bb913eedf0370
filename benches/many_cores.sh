#!/usr/bin/env bash
# benches/many_cores.sh: shardwheel against tokio at 1, 2, 4, 8 and 16 threads (those of
# them the machine has, `nproc`), in one command that builds once (release) and prints one
# markdown table, a row per measure and thread count: shardwheel's figure, its peer's, and
# the ratio of the two, both measured back to back in this run.
#
#   bash benches/many_cores.sh                        # every part, every thread count
#   THREADS="1 2" PARTS="pairs sleep" bash benches/many_cores.sh
#   QUICK=1 bash benches/many_cores.sh                # a smoke run: a few minutes on 2 cores
#
# The parts (PARTS, default "pairs sleep httpd"):
# - pairs: arm a 30 s timeout and cancel it, from T producer threads, with PENDING far
#   timeouts waiting. shardwheel: `examples/arm_cancel_loop.rs` (T shards, each producer on
#   its own); tokio: `benches/arm_cancel.rs --pairs tokio` (a runtime of T workers, a task on
#   each, as a tokio server arms its `Sleep`s). PAIRS pairs per producer (default 2,000,000).
# - sleep: a `Sleep` made, polled once, dropped, in tokio tasks, shardwheel's against
#   `tokio::time::sleep` on the same runtime (`benches/sleep.rs`, criterion; SLEEP_WARM and
#   SLEEP_SECS seconds of warm-up and measurement; SLEEP_WORKERS=T picks its runtime's size).
# - httpd: `httpd/bench.sh` as it is, with THREADS=T: shardwheel-httpd's hyper stack on
#   shardwheel's timer against the same stack on tokio's, and the local stack against nginx
#   (bench.sh's nginx has 2 workers whatever T is); req/s on `/` and the `/delay/50` p99.
#   HTTPD_RUNS runs each (default 1); wrk gets WRK_THREADS threads (default: T / 2, at least
#   2); bench.sh's other settings (WRK_SECS, SILENT, IDLE, …) pass through from the
#   environment, SERVERS among them: with the sizing variants (`hyper-shardwheel-1shard`,
#   `-unpinned`, …; docs/performance.md, "Sizing beside a runtime") bench.sh's table in the
#   log compares each with the default, run by run. It needs wrk and nginx, which bench.sh installs when missing (and jq, which
#   this script installs first).
#
# - proxy: `proxy/scale.sh` with one proxy process of T worker threads (so that the timer is
#   shared by T workers: tokio's one driver, tokio's per-worker alternative timer, and
#   shardwheel's T shards), PROXY_CONNS connections (default 10,000) and PROXY_RATE req/s
#   (default 5,000 a thread), one round: the proxy's CPU per request and request p99 on
#   shardwheel's timer against tokio's and tokio-alt's.
#
# Every figure is a rate (higher is better) but the p99, and the ratio is shardwheel's
# advantage: > 1 means shardwheel does better. Logs go to a temporary folder, named at the
# end. On a loaded machine the figures say little: run it on an idle one.
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=${QUICK:-}
PARTS=${PARTS:-pairs sleep httpd proxy}
PENDING=${PENDING:-10000}
PAIRS=${PAIRS:-$([[ -n $QUICK ]] && echo 200000 || echo 2000000)}
SLEEP_WARM=${SLEEP_WARM:-$([[ -n $QUICK ]] && echo 0.5 || echo 2)}
SLEEP_SECS=${SLEEP_SECS:-$([[ -n $QUICK ]] && echo 1 || echo 5)}
HTTPD_RUNS=${HTTPD_RUNS:-1}
if [[ -n $QUICK ]]; then
  # bench.sh's settings for a smoke run, unless given.
  export WRK_SECS=${WRK_SECS:-1} SILENT=${SILENT:-200} IDLE=${IDLE:-50} SLOWLORIS=${SLOWLORIS:-10}
  export HEADER_MS=${HEADER_MS:-500} IDLE_MS=${IDLE_MS:-1000} DELAY_CONNS=${DELAY_CONNS:-100}
fi
cores=$(nproc)
if [[ -z ${THREADS:-} ]]; then
  THREADS=
  for t in 1 2 4 8 16; do ((t <= cores)) && THREADS+="$t "; done
fi
say() { printf 'many_cores.sh: %s\n' "$*" >&2; }
has() { [[ " $PARTS " == *" $1 "* ]]; }

logs=$(mktemp -d /tmp/many-cores.XXXXXX)
rows=$logs/rows.tsv
: >"$rows"
# A row: threads, what, unit, shardwheel's figure, the peer's name and figure, and whether
# lower is better (a latency); the ratio is computed when the table is printed.
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$rows"; }

# jq reads cargo's and bench.sh's JSON (bench.sh installs it too, but only once it runs).
if ! command -v jq >/dev/null; then
  say "installing jq with apt-get (missing)"
  if [[ $EUID -eq 0 ]]; then apt-get install -y -qq jq >/dev/null; else sudo apt-get install -y -qq jq >/dev/null; fi
fi

# --- build, once ------------------------------------------------------------------------------
say "building (release): the examples, the benches, the server and its client"
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-$cores}
cargo build --release -q --example arm_cancel_loop
target=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
LOOP=$target/release/examples/arm_cancel_loop
# A bench's executable, as `cargo bench --no-run` names it.
bench_exe() {
  cargo bench -q --no-run --bench "$1" --message-format json |
    jq -r "select(.reason == \"compiler-artifact\" and .target.name == \"$1\") | .executable"
}
has pairs && ARM_CANCEL=$(bench_exe arm_cancel)
has sleep && SLEEP=$(bench_exe sleep)
has httpd && cargo build --release -q -p shardwheel-httpd -p shardwheel-conns
has proxy && cargo build --release -q -p shardwheel-proxy -p shardwheel-conns

# --- the parts --------------------------------------------------------------------------------
pairs() { # $1 threads
  local t=$1 ours theirs
  say "pairs, $t producer(s): shardwheel"
  "$LOOP" "$t" "$PENDING" "$PAIRS" 2>&1 | tee "$logs/pairs.$t.shardwheel" >&2 || true
  # "…, 24.61 M pairs/s in all, …"
  ours=$(sed -n 's/.*, \([0-9.]*\) M pairs\/s in all.*/\1/p' "$logs/pairs.$t.shardwheel")
  say "pairs, $t producer(s): tokio"
  "$ARM_CANCEL" --pairs tokio "$PENDING" "$t" "$PAIRS" 2>&1 | tee "$logs/pairs.$t.tokio" >&2 || true
  # "tokio: N pairs in T (12.3 ns/pair, …)": ns per pair over all producers.
  theirs=$(sed -n 's/.*(\([0-9.]*\) ns\/pair.*/\1/p' "$logs/pairs.$t.tokio" | awk '{printf "%.2f", 1e3 / $1}')
  row "$t" "arm + cancel pairs, $PENDING pending" "M/s" "${ours:--}" tokio "${theirs:--}" 0
}

sleeps() { # $1 threads
  local t=$1 ours theirs
  say "Sleep churn, $t worker(s)"
  SLEEP_WORKERS=$t "$SLEEP" --bench --output-format bencher --warm-up-time "$SLEEP_WARM" \
    --measurement-time "$SLEEP_SECS" "; $t workers/" 2>&1 | tee "$logs/sleep.$t" >&2 || true
  # "test …; 1 workers/shardwheel Sleep/1 ... bench:   41 ns/iter (+/- 1)": ns per sleep per worker.
  rate() { grep "$1" "$logs/sleep.$t" | sed -n 's/.*bench: *\([0-9,]*\) ns\/iter.*/\1/p' | tr -d , |
    awk -v t="$t" '$1 > 0 {printf "%.2f", t * 1e3 / $1}' || true; }
  ours=$(rate 'shardwheel Sleep')
  theirs=$(rate 'tokio::time::sleep')
  row "$t" "Sleep made, polled once, dropped" "M/s" "${ours:--}" "tokio::time::sleep" "${theirs:--}" 0
}

httpd() { # $1 threads
  local t=$1 dir results
  say "httpd/bench.sh, $t thread(s)"
  # Its table to a log, its progress (and the folder of its results) to the terminal and a log.
  { THREADS=$t RUNS=$HTTPD_RUNS WRK_THREADS=${WRK_THREADS:-$((t / 2 > 2 ? t / 2 : 2))} \
    bash httpd/bench.sh 2>&1 >"$logs/httpd.$t" || say "httpd/bench.sh failed at $t thread(s)"; } |
    tee "$logs/httpd.$t.err" >&2
  dir=$(sed -n 's/^bench.sh: logs and results.jsonl in //p' "$logs/httpd.$t.err" | tail -1)
  results=${dir:-/nonexistent}/results.jsonl
  # The median over the runs of a server's figure ($2: a jq path), or "-".
  fig() {
    [[ -r $results ]] || { echo -; return; }
    jq -rs --arg k "$1" "[.[] | select(.key == \$k) | $2 | select(. != null)] | sort |
      if length == 0 then \"-\" else .[(length - 1) / 2 | floor] end" "$results"
  }
  row "$t" "hyper server, req/s on /" "req/s" "$(fig hyper-shardwheel .rps)" "hyper on tokio's timer" "$(fig hyper-tokio .rps)" 0
  local p99='(.delay.p99 // empty) / 1000' # µs in the results
  row "$t" "hyper server, /delay/50 p99" "ms" "$(fig hyper-shardwheel "$p99")" "hyper on tokio's timer" "$(fig hyper-tokio "$p99")" 1
  row "$t" "local stack, req/s on /" "req/s" "$(fig local .rps)" "nginx, 2 workers" "$(fig nginx .rps)" 0
}

proxy() { # $1 threads
  local t=$1 dir
  say "proxy/scale.sh, 1 process of $t worker(s)"
  { CONNS=${PROXY_CONNS:-10000} RATE=${PROXY_RATE:-$((5000 * t))} RUNS=1 PROXY_PROCS=1 THREADS=$t \
    TIMERS="shardwheel tokio tokio-alt" bash proxy/scale.sh 2>&1 >"$logs/proxy.$t" ||
    say "proxy/scale.sh failed at $t thread(s)"; } | tee "$logs/proxy.$t.err" >&2
  dir=$(sed -n "s/^scale.sh: logs and each run's JSON: //p" "$logs/proxy.$t.err" | tail -1)
  python3 httpd/scale_table.py "${dir:-/nonexistent}" --json >"$logs/proxy.$t.json" 2>/dev/null || echo '{}' >"$logs/proxy.$t.json"
  # A timer's median of a measure, or "-".
  pfig() { jq -r --arg n "$1" --arg m "$2" '.[$n][$m] // "-" | if type == "number" then (. * 100 | round / 100) else . end' "$logs/proxy.$t.json"; }
  local peer
  for peer in tokio tokio-alt; do
    row "$t" "proxy, CPU per request" "µs" "$(pfig shardwheel 'server CPU per request')" "$peer" "$(pfig "$peer" 'server CPU per request')" 1
    row "$t" "proxy, request p99" "ms" "$(pfig shardwheel 'latency p99')" "$peer" "$(pfig "$peer" 'latency p99')" 1
  done
}

for t in $THREADS; do
  has pairs && pairs "$t"
  has sleep && sleeps "$t"
  has httpd && httpd "$t"
  has proxy && proxy "$t"
done

# --- the table --------------------------------------------------------------------------------
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $cores cores, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg);" \
  "PARTS=\"$PARTS\" THREADS=\"${THREADS% }\" PENDING=$PENDING PAIRS=$PAIRS${QUICK:+ QUICK=1}"
echo
echo "| threads | measure | unit | shardwheel | peer | peer's | shardwheel's advantage |"
echo "|---:|---|---|---:|---|---:|---:|"
awk -F'\t' '{
  ratio = "-"
  if ($4 != "-" && $6 != "-" && $4 > 0 && $6 > 0) ratio = sprintf("%.2fx", $7 == 1 ? $6 / $4 : $4 / $6)
  printf "| %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, ratio
}' "$rows"
echo
echo "(advantage: shardwheel / peer for rates, peer / shardwheel for the p99 and the CPU per request; > 1x: shardwheel does better)"
say "logs in $logs"
