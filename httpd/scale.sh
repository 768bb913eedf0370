#!/usr/bin/env bash
# httpd/scale.sh: shardwheel-httpd (the local stack, `--processes N`) beside nginx
# (`worker_processes N`) at many connections, a million by default, with the same timeouts;
# RUNS rounds, the servers in turn within a round; one table of medians and spreads at the
# end. Issue 30, item 4.
#
#   bash httpd/scale.sh                              # 1,000,000 connections, 1 round
#   QUICK=1 bash httpd/scale.sh                      # a smoke run: 4,000 connections
#   CONNS=200000 RUNS=3 SERVERS="local nginx" bash httpd/scale.sh
#
# Each run waits first, SETTLE_S (180) at most, for the machine to be done with the last one.
#
# A process holds at most 20,000 descriptors here (the hard limit, not to be raised), so each
# server runs N = CONNS / 18,000 processes (rounded up) on one port (`SO_REUSEPORT`), one
# thread each, each holding up to 19,500 (the kernel's spread over them is not even), and the
# load generator (`shardwheel-load`) runs CONNS / 18,000 processes from CONNS / 20,000
# loopback source addresses (a source holds up to 55,000 connections to one server). Each
# run:
#   - opens CONNS connections at OPEN_PER_MS: SILENT that send nothing, SLOWLORIS that trickle
#     a header byte every TRICKLE_MS, IDLE that send one `GET /` and wait, and ACTIVE
#     keep-alive ones that send `GET /` open-loop at RATE req/s in all;
#   - after WARMUP s (a fifth of the ramp, 2 s at least), measures SECS s: request latency,
#     the server's CPU (all its processes) and RSS, and the kernel's socket memory
#     (`/proc/net/sockstat`'s TCP pages, and the slab's growth, read once 95 % of the sockets
#     are up, against before the ramp, over the connections then held);
#   - at the window's end, the ACTIVE connections stop sending together: their idle timeouts
#     fall due over ACTIVE / RATE s (each counts from its connection's last response; the
#     default, 10 s); every close is timed against its timeout (idle from
#     the last response, header from the connect), none early, nginx's early ones counted.
# The timeouts (HEADER_S, IDLE_S) outlast the ramp, the warm-up and the window, so every
# connection is held while requests are measured. The local stack reports its longest
# event-loop turn and the turns over 5 ms (its summary, each process's), by the wall clock
# and, with `--turn-cpu`, by each thread's CPU clock (the wall clock counts the time a
# process waited for a core: here a hundred processes share two); nginx has no such count.
#
# Everything listens on and connects to loopback addresses only; every run is bounded (the
# generator's --max-secs, the servers' SIGTERM/SIGQUIT). Needs nginx and jq (installed with
# apt-get when missing). Logs and each run's JSON go to a temporary folder, named at the end;
# `httpd/scale_table.py FOLDER` prints the table again. What ran out first, if anything,
# is in the generator's report (connects refused and why) and the machine's lines.
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=${QUICK:-}
if [[ -n $QUICK ]]; then
  CONNS=${CONNS:-4000} RATE=${RATE:-1000} RUNS=${RUNS:-1} WARMUP=${WARMUP:-1} SECS=${SECS:-3}
  HEADER_S=${HEADER_S:-8} IDLE_S=${IDLE_S:-8} OPEN_PER_MS=${OPEN_PER_MS:-10}
fi
CONNS=${CONNS:-1000000}
RATE=${RATE:-10000}
RUNS=${RUNS:-1}
SECS=${SECS:-10}
SETTLE_S=${SETTLE_S:-180}
SERVERS=${SERVERS:-local nginx}
OPEN_PER_MS=${OPEN_PER_MS:-20}
TRICKLE_MS=${TRICKLE_MS:-2000}
ACTIVE=${ACTIVE:-$((CONNS / 10))}
IDLE=${IDLE:-$((CONNS * 3 / 10))}
SLOWLORIS=${SLOWLORIS:-$((CONNS / 20))}
SILENT=${SILENT:-$((CONNS - ACTIVE - IDLE - SLOWLORIS))}
ramp_s=$(((CONNS / OPEN_PER_MS + 999) / 1000))
# The generators' clock starts the warm-up at the ramp's planned end; at a million the
# ramp ran 10 % past it (55 s against 50), and a 2 s warm-up left the window to measure
# the generators' backlog. A fifth of the ramp, 2 s at least, covers that.
WARMUP=${WARMUP:-$((ramp_s / 5 > 2 ? ramp_s / 5 : 2))}
# An active connection sends a request every ACTIVE / RATE s, its first one up to that long
# after the warm-up starts: until then the header timeout is what holds it.
every_s=$(((ACTIVE + RATE - 1) / RATE))
IDLE_S=${IDLE_S:-$((ramp_s + WARMUP + SECS + 2 * every_s + 10))}
HEADER_S=${HEADER_S:-$IDLE_S}
SEND_S=${SEND_S:-30}
# 18,000 a process on average: SO_REUSEPORT's spread is not even (at 18,868 on average, some
# processes were sent 19,000 and more), and each holds up to 19,500 (`--max-conns`).
PROCS=${PROCS:-$(((CONNS + 17999) / 18000))}
LOAD_PROCS=${LOAD_PROCS:-$(((CONNS + 17999) / 18000))}
SOURCES=${SOURCES:-$(((CONNS + 19999) / 20000 > LOAD_PROCS ? (CONNS + 19999) / 20000 : LOAD_PROCS))}
MAX_SECS=${MAX_SECS:-$((ramp_s + WARMUP + SECS + IDLE_S + 30))}
PORT=${PORT:-20480}

say() { printf 'scale.sh: %s\n' "$*" >&2; }

logs=$(mktemp -d /tmp/httpd-scale.XXXXXX)
# shellcheck source=httpd/tools.sh
source httpd/tools.sh
trap 'stop_started 10' EXIT
trap 'exit 130' INT TERM

# --- tools and build ------------------------------------------------------------------------
if [[ " $SERVERS " == *" nginx "* ]]; then ensure_tools "$logs/apt.log" jq nginx-light; else ensure_tools "$logs/apt.log" jq; fi
NGINX=$(nginx_bin)
say "building shardwheel-httpd and shardwheel-load (release)"
cargo build --release -q -p shardwheel-httpd -p shardwheel-conns
target=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
HTTPD=$target/release/shardwheel-httpd
LOAD=$target/release/shardwheel-load

# --- the machine ----------------------------------------------------------------------------
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
avail_kib=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
say "$(nproc) cores, $((avail_kib / 1024)) MiB available, load $(cut -d' ' -f1-3 /proc/loadavg), open files $(ulimit -n) a process, somaxconn $(cat /proc/sys/net/core/somaxconn)"
say "$CONNS connections ($SILENT silent, $SLOWLORIS slowloris every ${TRICKLE_MS} ms, $IDLE idle, $ACTIVE active at $RATE req/s in all, stopping together)"
say "servers: $PROCS processes x 1 thread, header timeout ${HEADER_S}s, idle timeout ${IDLE_S}s"
say "load: $LOAD_PROCS processes from $SOURCES source addresses; ramp ~${ramp_s}s, warm-up ${WARMUP}s, window ${SECS}s, bound ${MAX_SECS}s"

# Kernel memory for sockets: the TCP pages of /proc/net/sockstat (buffers), and the slab
# (the sockets themselves, their files and epoll items), in KiB.
tcp_pages_kib() { awk -v p="$(getconf PAGESIZE)" '/^TCP:/ {for (i = 1; i < NF; i++) if ($i == "mem") print $(i + 1) * p / 1024}' /proc/net/sockstat; }
slab_kib() { awk '/^Slab:/ {print $2}' /proc/meminfo; }
tcp_inuse() { awk '/^TCP:/ {for (i = 1; i < NF; i++) if ($i == "inuse") print $(i + 1)}' /proc/net/sockstat; }

# The CPUs' idle share over one second, in percent (/proc/stat's idle and iowait).
cpu_idle_pct() {
  local a b
  read -ra a < <(grep '^cpu ' /proc/stat)
  sleep 1
  read -ra b < <(grep '^cpu ' /proc/stat)
  local total=0 k
  for k in 1 2 3 4 5 6 7 8; do total=$((total + b[k] - a[k])); done
  echo $(((b[4] + b[5] - a[4] - a[5]) * 100 / (total > 0 ? total : 1)))
}

# Waits, SETTLE_S at most, until the machine is done with the last run: its sockets closed
# (TCP in use within 1 % of the connections of where it was before that run) and the CPUs
# idle 80 % of a second, and says what it found. The load average the table shows at each
# start lags by a minute: runs back to back start at load 17-44 with the CPUs found 96-98 %
# idle and no socket left (2026-11-29), so this line, not the load, says a run began quiet.
settle() {
  local floor=$1 waited=$SECONDS idle
  while ((SECONDS - waited < SETTLE_S)); do
    if (($(tcp_inuse) <= floor + CONNS / 100)); then
      idle=$(cpu_idle_pct)
      ((idle >= 80)) && break
    else
      sleep 1
    fi
  done
  say "settled in $((SECONDS - waited)) s: $(tcp_inuse) TCP sockets in use, CPUs ${idle:-?} % idle, load $(cut -d' ' -f1-3 /proc/loadavg)"
}

nginx_conf() { # $1 port, $2 dir
  nginx_conf_in "$1" "$2" "$PROCS" 19900 4096 $((HEADER_S * 1000)) $((IDLE_S * 1000)) $((SEND_S * 1000)) httpd/scale.sh
}

# Starts server $1 on port $2, logging to $3; sets SERVER_PID. Waits until it answers.
start_server() {
  local server=$1 port=$2 log=$3
  case $server in
    local)
      "$HTTPD" --addr "127.0.0.1:$port" --processes "$PROCS" --threads 1 --max-conns $((PROCS * 19500)) \
        --header-timeout-ms $((HEADER_S * 1000)) --idle-timeout-ms $((IDLE_S * 1000)) \
        --send-timeout-ms $((SEND_S * 1000)) --turn-cpu >"$log" 2>&1 &
      ;;
    nginx)
      nginx_conf "$port" "$logs/nginx.$port"
      "$NGINX" -p "$logs/nginx.$port" -c "$logs/nginx.$port/nginx.conf" >"$log" 2>&1 &
      ;;
    *)
      say "unknown server $server"
      exit 1
      ;;
  esac
  SERVER_PID=$!
  started_pids+=("$SERVER_PID")
  for _ in $(seq 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  say "$server did not start"
  cat "$log" >&2
  exit 1
}

# Stops the server: SIGTERM for the local stack (graceful), SIGQUIT for nginx (graceful).
stop_server() {
  local server=$1 pid=$2
  if [[ $server == nginx ]]; then kill -QUIT "$pid" 2>/dev/null || true; else kill -TERM "$pid" 2>/dev/null || true; fi
  for _ in $(seq 300); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

failed=0
first_inuse=$(tcp_inuse)
for run in $(seq "$RUNS"); do
  for server in $SERVERS; do
    name=$server.$run
    port=$PORT
    PORT=$((PORT + 1))
    say "run $run/$RUNS: $server"
    settle "$first_inuse"
    before_slab=$(slab_kib)
    before_tcp=$(tcp_pages_kib)
    before_inuse=$(tcp_inuse)
    start_server "$server" "$port" "$logs/$name.server.log"
    status=0
    "$LOAD" --addr "127.0.0.1:$port" --active "$ACTIVE" --rate "$RATE" --idle "$IDLE" --silent "$SILENT" \
      --slowloris "$SLOWLORIS" --trickle-ms "$TRICKLE_MS" --header-timeout-ms $((HEADER_S * 1000)) \
      --idle-timeout-ms $((IDLE_S * 1000)) --open-per-ms "$OPEN_PER_MS" --warmup-secs "$WARMUP" --secs "$SECS" \
      --quiet-at "$SECS" --max-secs "$MAX_SECS" --processes "$LOAD_PROCS" --sources "$SOURCES" \
      --server-tree "$SERVER_PID" --json >"$logs/$name.json" 2>"$logs/$name.load.log" &
    load_pid=$!
    started_pids+=("$load_pid")
    # The kernel's memory once every connection is held (both ends' sockets: 95 % of them
    # is taken as all, the rest failing or on their way), or at the window's end at the latest.
    until_s=$((SECONDS + ramp_s * 3 + WARMUP + SECS))
    while ((SECONDS < until_s)) && (($(tcp_inuse) < before_inuse + CONNS * 2 * 95 / 100)); do
      kill -0 "$load_pid" 2>/dev/null || break
      sleep 1
    done
    printf '{"server": "%s", "run": %s, "tcp_inuse": %s, "slab_kib": %s, "tcp_pages_kib": %s}\n' \
      "$server" "$run" "$(($(tcp_inuse) - before_inuse))" "$(($(slab_kib) - before_slab))" "$(($(tcp_pages_kib) - before_tcp))" \
      >"$logs/$name.kernel.json"
    wait "$load_pid" || status=$?
    stop_server "$server" "$SERVER_PID"
    if ((status != 0)); then
      say "the load generator failed ($status): $logs/$name.load.log"
      tail -5 "$logs/$name.load.log" >&2
      failed=$((failed + 1))
    fi
  done
done

python3 httpd/scale_table.py "$logs" || true
say "logs and each run's JSON: $logs"
if ((failed > 0)); then
  say "$failed run(s) failed: their columns lack them"
  exit 1
fi
