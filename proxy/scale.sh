#!/usr/bin/env bash
# proxy/scale.sh: shardwheel-proxy at many connections (200,000 by default), once on each
# timer it can run on, side by side in one command, RUNS rounds (the timers in turn within a
# round, so that a change in the machine's load falls on all of them); one table of medians
# and spreads at the end. Issue 30, item 3.
#
#   bash proxy/scale.sh                          # 200,000 connections, 5 rounds, every timer
#   QUICK=1 bash proxy/scale.sh                  # a smoke run: 4,000 connections, 1 round
#   CONNS=100000 RATE=10000 RUNS=3 TIMERS="shardwheel tokio" bash proxy/scale.sh
#
# Each run: the upstream (`shardwheel-proxy-upstream`, one process for the whole command, of
# UPSTREAM_THREADS workers at priority UPSTREAM_NICE: 2 and -10 by default, see below), the
# proxy on one timer (`--processes`: each process holds at most ~15,000 client connections,
# under this machine's 20,000 descriptors a process), and the load generator
# (`shardwheel-load`, its own processes, from SOURCES loopback addresses), which:
#   - opens CONNS connections at OPEN_PER_MS: ACTIVE keep-alive ones that send `GET /` open-loop
#     at RATE req/s in all, IDLE that send one request and wait, SILENT that send nothing, and
#     SLOWLORIS that trickle a header byte every TRICKLE_MS;
#   - after WARMUP s, measures SECS s: every request's latency from its scheduled send (HDR),
#     the proxy's CPU (all its processes) per request and its RSS per connection held;
#   - at the window's end, the ACTIVE connections stop sending together (their idle timeouts,
#     each from its last response, fall due over ACTIVE / RATE s: 10 s by default; a mass expiry of that
#     many idle timeouts), and every close is timed against its timeout: idle (IDLE and the
#     quiet ones, from their last response), header (SILENT and SLOWLORIS, from the connect),
#     none early.
# The proxy's idle and header timeouts (IDLE_S, HEADER_S) are longer than the ramp, the
# warm-up and the window, so that every connection is held while requests are measured.
#
# Timers (TIMERS): shardwheel (its ambient calls, a shard per worker thread), tokio
# (`tokio::time`), tokio-alt (tokio's per-worker timer, a `--cfg tokio_unstable` build in
# target/tokio-unstable, whose proxy tests run first), pingora (`fast_timeout`). Every proxy
# process has THREADS worker threads (default 1: many processes on few cores, as nginx's
# workers).
#
# Everything listens on and connects to loopback addresses only; every run is bounded (the
# generator's --max-secs, the proxy's SIGTERM and grace). Logs and each run's JSON go to a
# temporary folder, named at the end; `httpd/scale_table.py FOLDER` prints the table again.
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=${QUICK:-}
if [[ -n $QUICK ]]; then
  CONNS=${CONNS:-4000} RATE=${RATE:-2000} RUNS=${RUNS:-1} WARMUP=${WARMUP:-1} SECS=${SECS:-3}
  IDLE_S=${IDLE_S:-8} HEADER_S=${HEADER_S:-8} OPEN_PER_MS=${OPEN_PER_MS:-10}
fi
CONNS=${CONNS:-200000}
RATE=${RATE:-10000}
RUNS=${RUNS:-5}
WARMUP=${WARMUP:-5}
SECS=${SECS:-20}
TIMERS=${TIMERS:-shardwheel tokio tokio-alt pingora}
THREADS=${THREADS:-1}
OPEN_PER_MS=${OPEN_PER_MS:-12}
TRICKLE_MS=${TRICKLE_MS:-1000}
# The mix: half active, 30 % idle after one request, 15 % silent, 5 % slowloris.
ACTIVE=${ACTIVE:-$((CONNS / 2))}
IDLE=${IDLE:-$((CONNS * 3 / 10))}
SLOWLORIS=${SLOWLORIS:-$((CONNS / 20))}
SILENT=${SILENT:-$((CONNS - ACTIVE - IDLE - SLOWLORIS))}
# The ramp takes CONNS / OPEN_PER_MS ms; the timeouts outlast it, the warm-up and the window.
ramp_s=$(((CONNS / OPEN_PER_MS + 999) / 1000))
IDLE_S=${IDLE_S:-$((ramp_s + WARMUP + SECS + 10))}
HEADER_S=${HEADER_S:-$IDLE_S}
PROXY_PROCS=${PROXY_PROCS:-$(((CONNS + 14999) / 15000))}
LOAD_PROCS=${LOAD_PROCS:-$(((CONNS + 17999) / 18000))}
# A source address holds up to 55,000 connections (the ports the generator hands out): 20,000
# each, and at least one per generator process.
SOURCES=${SOURCES:-$(((CONNS + 19999) / 20000 > LOAD_PROCS ? (CONNS + 19999) / 20000 : LOAD_PROCS))}
# The generator's bound: the ramp, warm-up, window, the quiet ones' idle timeout, and a margin.
MAX_SECS=${MAX_SECS:-$((ramp_s + WARMUP + SECS + IDLE_S + 20))}
PORT=${PORT:-19480}
UPSTREAM_THREADS=${UPSTREAM_THREADS:-2}
UPSTREAM_NICE=${UPSTREAM_NICE:--10}

say() { printf 'scale.sh: %s\n' "$*" >&2; }

logs=$(mktemp -d /tmp/proxy-scale.XXXXXX)
# shellcheck source=httpd/tools.sh
source httpd/tools.sh
trap 'stop_started 10' EXIT
trap 'exit 130' INT TERM

# --- build ----------------------------------------------------------------------------------
command -v jq >/dev/null || { say "jq is needed (apt-get install jq)"; exit 1; }
command -v ss >/dev/null || { say "ss is needed (apt-get install iproute2)"; exit 1; }
say "building shardwheel-proxy and shardwheel-load (release)"
cargo build --release -q -p shardwheel-proxy -p shardwheel-conns
target=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
PROXY=$target/release/shardwheel-proxy
UPSTREAM=$target/release/shardwheel-proxy-upstream
LOAD=$target/release/shardwheel-load
ALT_PROXY=
alt_failed=0
if [[ " $TIMERS " == *" tokio-alt "* ]]; then
  # tokio's alternative timer exists only under --cfg tokio_unstable: a build of its own, in
  # a target directory of its own (the flag would rebuild everything else), its tests first.
  say "building the proxy with --cfg tokio_unstable (target/tokio-unstable) and running its tests"
  RUSTFLAGS="--cfg tokio_unstable" CARGO_TARGET_DIR=$target/tokio-unstable \
    cargo test --release -q -p shardwheel-proxy --test proxy tokio_alt >"$logs/tokio-alt-tests.log" 2>&1 &&
    ALT_PROXY=$target/tokio-unstable/release/shardwheel-proxy
  if [[ -z $ALT_PROXY ]]; then
    # The other timers are still compared: tokio-alt is left out, and the script fails at the end.
    say "the tokio-alt build or its tests failed ($logs/tokio-alt-tests.log): tokio-alt left out"
    TIMERS=${TIMERS//tokio-alt/}
    alt_failed=1
  fi
fi

# --- the machine ----------------------------------------------------------------------------
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
avail_kib=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
say "$(nproc) cores, $((avail_kib / 1024)) MiB available, load $(cut -d' ' -f1-3 /proc/loadavg), open files $(ulimit -n) a process"
say "$CONNS connections ($ACTIVE active at $RATE req/s in all, $IDLE idle, $SILENT silent, $SLOWLORIS slowloris every ${TRICKLE_MS} ms)"
say "proxy: $PROXY_PROCS processes x $THREADS threads, idle timeout ${IDLE_S}s, header timeout ${HEADER_S}s"
say "load: $LOAD_PROCS processes from $SOURCES source addresses; ramp ~${ramp_s}s, warm-up ${WARMUP}s, window ${SECS}s, bound ${MAX_SECS}s"
if ((avail_kib < CONNS * 40)); then
  say "warning: ${avail_kib} KiB available is under 40 KiB a connection (both ends' sockets and buffers)"
fi

# Starts a command whose stdout says "listening on ADDR"; sets STARTED_PID and STARTED_ADDR.
start_listening() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  STARTED_PID=$!
  started_pids+=("$STARTED_PID")
  for _ in $(seq 600); do
    STARTED_ADDR=$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$log" | head -1)
    [[ -n $STARTED_ADDR ]] && return 0
    kill -0 "$STARTED_PID" 2>/dev/null || break
    sleep 0.1
  done
  say "did not start: $*"
  cat "$log" >&2
  exit 1
}

# Stops process $1 with SIGTERM, waiting at most $2 s.
stop() {
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq $(($2 * 10))); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$1" 2>/dev/null || true
}

# The upstream stands for a server on machines of its own: here it shares the two cores with
# the proxies and the generators, and one thread among some thirty busy processes got a
# thirtieth of the machine, fell behind during a ramp, and the proxies' pools opened
# connections to it by the thousand (502s and 504s, one round in twenty at 12 connects a ms).
# So it runs UPSTREAM_THREADS workers at a higher priority (UPSTREAM_NICE, where this user may
# raise one); its CPU is not counted as the proxy's.
upstream_cmd=("$UPSTREAM" --listen 127.0.0.1:0 --threads "$UPSTREAM_THREADS")
if ((UPSTREAM_NICE < 0)) && ! nice -n "$UPSTREAM_NICE" true 2>/dev/null; then
  say "warning: may not raise the upstream's priority (nice $UPSTREAM_NICE): it runs at the proxies'"
elif ((UPSTREAM_NICE != 0)); then
  upstream_cmd=(nice -n "$UPSTREAM_NICE" "${upstream_cmd[@]}")
fi
start_listening "$logs/upstream.log" "${upstream_cmd[@]}"
say "upstream: $UPSTREAM_THREADS threads, nice $UPSTREAM_NICE"
upstream=$STARTED_ADDR

failed=0
for run in $(seq "$RUNS"); do
  for timer in $TIMERS; do
    bin=$PROXY
    [[ $timer == tokio-alt ]] && bin=$ALT_PROXY
    name=$timer.$run
    # A port of its own each run: the last run's closed connections wait out TIME_WAIT.
    port=$PORT
    PORT=$((PORT + 1))
    say "run $run/$RUNS: $timer"
    start_listening "$logs/$name.proxy.log" "$bin" --timer "$timer" --listen "127.0.0.1:$port" \
      --upstream "$upstream" --processes "$PROXY_PROCS" --threads "$THREADS" \
      --idle-timeout "${IDLE_S}s" --header-timeout "${HEADER_S}s" --upstream-timeout 30s --send-timeout 30s \
      --grace 2s --backlog 4096
    proxy_pid=$STARTED_PID
    # The proxies' upstream pools at the window's end (when the generator reads the RSS):
    # the upstream's established connections. Unbounded, a pool kept as many as its process
    # ever had requests in flight at once, some 20 KiB each: a burst's worth, which set the
    # RSS per client connection more than the timer did (at 60,000 connections, 13.7 to
    # 15.0 KiB over 1,400 to 5,400 upstream connections, on either timer). The pools stay
    # unbounded (hyper's default), as the timers' earlier rounds ran, and the table shows
    # their size beside the RSS.
    (
      sleep $((ramp_s + WARMUP + SECS))
      n=$(ss -Htn state established "( sport = :${upstream##*:} )" | wc -l)
      printf '{"upstream_conns": %d}\n' "$n" >"$logs/$name.upstream.json"
    ) &
    sampler=$!
    status=0
    "$LOAD" --addr "127.0.0.1:$port" --active "$ACTIVE" --rate "$RATE" --idle "$IDLE" --silent "$SILENT" \
      --slowloris "$SLOWLORIS" --trickle-ms "$TRICKLE_MS" --header-timeout-ms $((HEADER_S * 1000)) \
      --idle-timeout-ms $((IDLE_S * 1000)) --open-per-ms "$OPEN_PER_MS" --warmup-secs "$WARMUP" --secs "$SECS" \
      --quiet-at "$SECS" --max-secs "$MAX_SECS" --processes "$LOAD_PROCS" --sources "$SOURCES" \
      --server-tree "$proxy_pid" --json >"$logs/$name.json" 2>"$logs/$name.load.log" || status=$?
    # A generator that ended early leaves the count unread: never the next run's proxy's.
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    stop "$proxy_pid" 10
    # shardwheel's own lateness (each expiry's turn against its tick), summed over the
    # processes, beside the client's closes: what of a close's lateness was the timer's.
    if [[ $timer == shardwheel ]]; then
      say "$name: $(grep -ho 'timer total .*' "$logs/$name.proxy.log" || echo 'no timer line')"
    fi
    if ((status != 0)); then
      say "the load generator failed ($status): $logs/$name.load.log"
      tail -5 "$logs/$name.load.log" >&2
      failed=$((failed + 1))
    fi
  done
done
stop "${started_pids[0]}" 5

python3 httpd/scale_table.py "$logs" || true
say "logs and each run's JSON: $logs"
if ((failed > 0 || alt_failed > 0)); then
  say "$failed run(s) failed, tokio-alt left out: $alt_failed (1: yes); the table lacks them"
  exit 1
fi
