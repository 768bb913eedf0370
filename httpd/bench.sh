#!/usr/bin/env bash
# httpd/bench.sh: shardwheel-httpd (--stack local, --stack hyper with each timer) beside
# nginx, on loopback, with the same timeouts: `wrk -t2 -c256 -d5s` on `/`; `wrk -t2 -c1000
# -d5s` on `/delay/50` (not nginx: no such route), its latency min / p50 / p99; then
# shardwheel-conns's 10 000 silent, 1 000 idle keep-alive and 200 slowloris connections, then
# (a run of its own) 20 unread ones (pipelined requests, never a read: closed at the send
# timeout; nginx's `send_timeout` set to the same value); req/s, client-seen close lateness
# per class (p50/p99/max, early), server RSS before and with the connections open, and CPU
# seconds. RUNS times (3 by default), each run measuring
# every server back to back, starting with a different one each run; then
# `httpd/bench_table.py` prints one markdown table (the median and the spread per cell) and
# the issue's bars, met or missed, judged on the run-by-run ratios' median. CI does not run
# it: the README's table does, with the command.
#
#   bash httpd/bench.sh
#   RUNS=5 HEADER_MS=2000 IDLE_MS=5000 SEND_MS=2000 SILENT=10000 IDLE=1000 SLOWLORIS=200 UNREAD=20 PORT=18480 bash httpd/bench.sh
#   SERVERS="local nginx" RUNS=1 bash httpd/bench.sh     # a subset
#   SERVERS="hyper-shardwheel hyper-shardwheel-unpinned hyper-shardwheel-1shard hyper-tokio" bash httpd/bench.sh
#       # the timer service's sizing beside tokio's workers: hyper-shardwheel[-<N>shard][-unpinned]
#
# Installs wrk, nginx-light (or nginx) and jq with apt-get when missing, and says so. Every
# server it starts is stopped on exit. Everything listens on 127.0.0.1 only; every run of
# requests is bounded (wrk by -d, the client by --max-secs).
set -euo pipefail
cd "$(dirname "$0")/.."

HEADER_MS=${HEADER_MS:-2000}
IDLE_MS=${IDLE_MS:-5000}
SEND_MS=${SEND_MS:-2000}
SILENT=${SILENT:-10000}
IDLE=${IDLE:-1000}
SLOWLORIS=${SLOWLORIS:-200}
UNREAD=${UNREAD:-20}
TRICKLE_MS=${TRICKLE_MS:-100}
THREADS=${THREADS:-2}
WRK_THREADS=${WRK_THREADS:-2}
WRK_CONNS=${WRK_CONNS:-256}
WRK_SECS=${WRK_SECS:-5}
DELAY_MS=${DELAY_MS:-50}
DELAY_CONNS=${DELAY_CONNS:-1000}
RUNS=${RUNS:-3}
SERVERS=${SERVERS:-local hyper-shardwheel hyper-tokio nginx}
# The client's bound: the idle timeout, the opening and a margin.
MAX_SECS=${MAX_SECS:-$((IDLE_MS / 1000 + HEADER_MS / 1000 + 10))}
PORT=${PORT:-18480}

say() { printf 'bench.sh: %s\n' "$*" >&2; }

tmp=$(mktemp -d /tmp/bench-httpd.XXXXXX)
# shellcheck source=httpd/tools.sh
source httpd/tools.sh
trap 'stop_started 5' EXIT
trap 'exit 130' INT TERM

# --- tools ---------------------------------------------------------------------------------
ensure_tools "$tmp/apt.log" wrk jq nginx-light
NGINX=$(nginx_bin)

# --- open files: 11 200 connections (or wrk's 1 000) and the server's share ----------------
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
wanted=$((SILENT + IDLE + SLOWLORIS > DELAY_CONNS ? SILENT + IDLE + SLOWLORIS + 1000 : DELAY_CONNS + 1000))
if (($(ulimit -n) < wanted)); then
  say "warning: ulimit -n is $(ulimit -n), below the $wanted wanted"
fi

# --- build ----------------------------------------------------------------------------------
say "building shardwheel-httpd and shardwheel-conns (release)"
cargo build --release -q -p shardwheel-httpd -p shardwheel-conns
target=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
HTTPD=$target/release/shardwheel-httpd
CONNS=$target/release/shardwheel-conns

# --- measuring a process tree ---------------------------------------------------------------
# The pids of $1 and its children (nginx's workers).
tree() {
  local pid=$1 stat
  echo "$pid"
  for stat in /proc/[0-9]*/stat; do
    # Field 4, after the command's closing parenthesis, is the parent.
    [[ $(sed 's/.*) //' "$stat" 2>/dev/null | cut -d' ' -f2) == "$pid" ]] && basename "$(dirname "$stat")"
  done
  return 0
}
rss_kib() { # the summed VmRSS of $@, KiB
  local sum=0 pid kib
  for pid in "$@"; do
    kib=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    sum=$((sum + ${kib:-0}))
  done
  echo "$sum"
}
cpu_ticks() { # the summed utime + stime of $@, clock ticks
  local sum=0 pid
  for pid in "$@"; do
    sum=$((sum + $(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{print $12 + $13}' || echo 0)))
  done
  echo "$sum"
}
TICK=$(getconf CLK_TCK)
secs() { awk -v t="$1" -v hz="$TICK" 'BEGIN {printf "%.2f", t / hz}'; }

# Waits (at most 10 s) until 127.0.0.1:$1 answers `GET /`.
wait_ready() {
  local port=$1
  for _ in $(seq 100); do
    if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$port/"; then return 0; fi
    sleep 0.1
  done
  return 1
}
# A free port from $PORT on.
next_port() {
  while curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$PORT/" || ss -Hltn "sport = :$PORT" | grep -q .; do
    PORT=$((PORT + 1))
  done
  echo "$PORT"
  PORT=$((PORT + 1))
}

# --- nginx's configuration ------------------------------------------------------------------
nginx_conf() { # $1 port, $2 dir
  nginx_conf_in "$1" "$2" 2 16384 1024 "$HEADER_MS" "$IDLE_MS" "$SEND_MS" httpd/bench.sh
}

# --- one server, one run -------------------------------------------------------------------
results=$tmp/results.jsonl
notes=()
# $1: the key, $2: the name in the table, $3: run, $4: port, $5: how to stop it (TERM or
# QUIT), the rest: its command. Appends one JSON object to $results.
bench() {
  local key=$1 name=$2 run=$3 port=$4 stop=$5
  shift 5
  local log=$tmp/$key.$run
  say "run $run, $name: starting on 127.0.0.1:$port"
  "$@" >"$log.out" 2>&1 &
  local pid=$!
  started_pids+=("$pid")
  if ! wait_ready "$port"; then
    notes+=("run $run: $name did not start: $(tail -2 "$log.out" | tr '\n' ' ')")
    kill -KILL "$pid" 2>/dev/null || true
    return 0
  fi
  local pids
  mapfile -t pids < <(tree "$pid")
  local rss_start cpu0 cpu1 cpu2 rss_before rss_peak=0 rss
  rss_start=$(rss_kib "${pids[@]}")
  cpu0=$(cpu_ticks "${pids[@]}")

  say "run $run, $name: wrk -t$WRK_THREADS -c$WRK_CONNS -d${WRK_SECS}s /"
  wrk "-t$WRK_THREADS" "-c$WRK_CONNS" "-d${WRK_SECS}s" "http://127.0.0.1:$port/" >"$log.wrk" 2>&1 || true
  local reqs count
  reqs=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$log.wrk")
  count=$(awk '/ requests in / {print $1}' "$log.wrk")
  cpu1=$(cpu_ticks "${pids[@]}")
  sleep 1 # wrk's connections closed
  rss_before=$(rss_kib "${pids[@]}")

  say "run $run, $name: $SILENT silent, $IDLE idle, $SLOWLORIS slowloris connections (at most $MAX_SECS s)"
  "$CONNS" --addr "127.0.0.1:$port" --silent "$SILENT" --idle "$IDLE" --slowloris "$SLOWLORIS" \
    --header-timeout-ms "$HEADER_MS" --idle-timeout-ms "$IDLE_MS" --trickle-ms "$TRICKLE_MS" \
    --max-secs "$MAX_SECS" --json >"$log.json" 2>"$log.conns.err" &
  local client=$!
  started_pids+=("$client")
  # The peak while they are open (every 50 ms; the silent ones are all open just before the
  # header timeout).
  while kill -0 "$client" 2>/dev/null; do
    rss=$(rss_kib "${pids[@]}")
    ((rss > rss_peak)) && rss_peak=$rss
    sleep 0.05
  done
  wait "$client" || notes+=("run $run, $name: shardwheel-conns failed: $(cat "$log.conns.err")")
  cpu2=$(cpu_ticks "${pids[@]}")

  # A run of their own (so that answering their pipelined requests does not weigh on the
  # others' lateness): connections that never read, closed at the send timeout.
  if ((UNREAD > 0)); then
    say "run $run, $name: $UNREAD unread connections (send timeout $SEND_MS ms)"
    "$CONNS" --addr "127.0.0.1:$port" --silent 0 --idle 0 --slowloris 0 --unread "$UNREAD" \
      --send-timeout-ms "$SEND_MS" --max-secs "$((SEND_MS / 1000 + 15))" --json >"$log.unread.json" 2>"$log.unread.err" ||
      notes+=("run $run, $name: shardwheel-conns --unread failed: $(cat "$log.unread.err")")
  else
    : >"$log.unread.json"
  fi

  # After the connections (so their RSS is not wrk's), the delayed route under 1 000 wrk
  # connections: wrk's latency runs from each request's write to its response, so its
  # minimum below the delay would be a timer firing early.
  local delay=null
  if [[ $key != nginx ]]; then
    say "run $run, $name: wrk -t$WRK_THREADS -c$DELAY_CONNS -d${WRK_SECS}s --latency /delay/$DELAY_MS"
    wrk "-t$WRK_THREADS" "-c$DELAY_CONNS" "-d${WRK_SECS}s" --latency -s httpd/bench_delay.lua \
      "http://127.0.0.1:$port/delay/$DELAY_MS" >"$log.delay" 2>&1 || true
    delay=$(awk '/^delay-latency-us/ {printf "{\"min\": %s, \"p50\": %s, \"p99\": %s, \"max\": %s, \"requests\": %s, \"errors\": %s", $3, $5, $7, $9, $11, $13}
      /^Requests\/sec:/ {rps = $2} END {if (rps != "") printf ", \"rps\": %s}", rps}' "$log.delay")
    [[ $delay == *'}' ]] || { notes+=("run $run, $name: /delay/ measured nothing: $(tail -2 "$log.delay" | tr '\n' ' ')"); delay=null; }
  fi

  kill "-$stop" "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true

  local conns=$((SILENT + IDLE + SLOWLORIS)) seen=null
  # The server's own reading of its timeout closes (shardwheel-httpd's summary).
  seen=$(sed -n 's/^summary: timeout closes.* p99 \([0-9.]*\) ms.*/\1/p' "$log.out")
  jq -cn --arg key "$key" --arg server "$name" --argjson run "$run" --argjson rps "${reqs:-null}" \
    --argjson requests "${count:-null}" \
    --argjson delay "$delay" --slurpfile conns "$log.json" --slurpfile unread "$log.unread.json" \
    --argjson rss "{\"start\": $rss_start, \"before\": $rss_before, \"peak\": $rss_peak}" \
    --argjson per_conn "$(((rss_peak - rss_before) * 1024 / (conns > 0 ? conns : 1)))" \
    --argjson cpu "{\"wrk\": $(secs $((cpu1 - cpu0))), \"conns\": $(secs $((cpu2 - cpu1)))}" \
    --argjson seen "${seen:-null}" \
    '{key: $key, server: $server, run: $run, rps: $rps, requests: $requests, delay: $delay,
      conns: (($conns[0] // null) | if . != null and ($unread[0] // null) != null then .classes.unread = $unread[0].classes.unread else . end),
      rss: $rss, per_conn: $per_conn, cpu: $cpu, seen_p99_ms: $seen}' >>"$results"
  local errors
  errors=$(jq -r '.errors | join("; ")' "$log.json" 2>/dev/null || true)
  [[ -n $errors ]] && notes+=("run $run, $name: the client's errors: $errors")
  errors=$(jq -r '.errors | join("; ")' "$log.unread.json" 2>/dev/null || true)
  [[ -n $errors ]] && notes+=("run $run, $name: the unread client's errors: $errors")
  return 0
}

common=(--threads "$THREADS" --header-timeout-ms "$HEADER_MS" --idle-timeout-ms "$IDLE_MS" --send-timeout-ms "$SEND_MS")
# One server of $SERVERS in run $2.
bench_key() {
  local key=$1 run=$2 port
  port=$(next_port)
  case $key in
    local)
      bench local "shardwheel-httpd --stack local" "$run" "$port" TERM "$HTTPD" --addr "127.0.0.1:$port" "${common[@]}" --stack local
      ;;
    hyper-shardwheel | hyper-shardwheel-* | hyper-tokio)
      local timer=${key#hyper-} sizing=() rest
      # The sizing variants: hyper-shardwheel[-<N>shard][-unpinned].
      if [[ $timer == shardwheel-* ]]; then
        rest=${timer#shardwheel}
        timer=shardwheel
        if [[ $rest =~ ^-([0-9]+)shards?(.*)$ ]]; then
          sizing+=(--timer-shards "${BASH_REMATCH[1]}")
          rest=${BASH_REMATCH[2]}
        fi
        if [[ $rest == -unpinned ]]; then
          sizing+=(--timer-pin false)
          rest=
        fi
        if [[ -n $rest ]]; then
          notes+=("unknown server $key in SERVERS (hyper-shardwheel[-<N>shard][-unpinned])")
          return 0
        fi
      fi
      # Only where the binary has it: a short run on a free port says.
      if timeout 10 "$HTTPD" --addr 127.0.0.1:0 --for 0.3 --stack hyper --timer "$timer" "${sizing[@]}" "${common[@]}" >/dev/null 2>"$tmp/probe.err"; then
        bench "$key" "shardwheel-httpd --stack hyper --timer $timer${sizing[*]:+ ${sizing[*]}}" "$run" "$port" TERM \
          "$HTTPD" --addr "127.0.0.1:$port" "${common[@]}" --stack hyper --timer "$timer" "${sizing[@]}"
      else
        notes+=("run $run: --stack hyper --timer $timer skipped: this binary does not run it ($(head -1 "$tmp/probe.err"))")
      fi
      ;;
    nginx)
      nginx_conf "$port" "$tmp/nginx.$run"
      bench nginx "nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///')" "$run" "$port" QUIT \
        "$NGINX" -p "$tmp/nginx.$run" -e "$tmp/nginx.$run/logs/error.log" -c "$tmp/nginx.$run/nginx.conf"
      ;;
    *) notes+=("unknown server $key in SERVERS") ;;
  esac
}

read -r -a keys <<<"$SERVERS"
for run in $(seq "$RUNS"); do
  # Each run starts with a different server, so none is always first (or last) on a
  # machine whose load drifts.
  for i in $(seq 0 $((${#keys[@]} - 1))); do
    bench_key "${keys[$(((i + run - 1) % ${#keys[@]}))]}" "$run"
  done
done

# --- the tables -----------------------------------------------------------------------------
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg); header timeout $HEADER_MS ms, idle timeout $IDLE_MS ms, send timeout $SEND_MS ms;" \
  "wrk -t$WRK_THREADS -c$WRK_CONNS -d${WRK_SECS}s /; wrk -t$WRK_THREADS -c$DELAY_CONNS -d${WRK_SECS}s /delay/$DELAY_MS; $SILENT silent, $IDLE idle, $SLOWLORIS slowloris (a byte every $TRICKLE_MS ms); $UNREAD unread; $RUNS run(s)"
echo
python3 httpd/bench_table.py "$results" --header-ms "$HEADER_MS" --idle-ms "$IDLE_MS" --send-ms "$SEND_MS" --delay-ms "$DELAY_MS"
echo
echo "Lateness is client-seen: from the connect call (silent, slowloris), the response read (idle) or the last request write that went through (unread: the server's wait starts near it, before or after, so a small negative is not early) plus the timeout, to the read that saw the close. Early (a server bug) is judged from the connect call, the request write, or the first request write (unread)."
for note in "${notes[@]}"; do
  echo "- $note"
done
say "logs and results.jsonl in $tmp"
