# httpd/tools.sh: sourced by httpd/bench.sh and httpd/scale.sh (not run by itself).
#
# ensure_tools LOG TOOL...: installs with apt-get each of TOOL (Debian package names) whose
# command is missing, saying so; nginx-light stands for nginx (and falls back to the full
# package). Debian starts an installed nginx as a service on port 80 unless policy-rc.d says
# no: it says no for the install. The install's output goes to LOG.
# nginx_bin: the nginx binary, or nothing.
# nginx_conf_in: nginx's configuration beside shardwheel-httpd (below).
# started_pids: the processes a script started; stop_started SECS, run on exit
# (`trap 'stop_started 5' EXIT`), sends each SIGTERM and kills those still running after SECS.

as_root() { if [[ $EUID -eq 0 ]]; then "$@"; else sudo "$@"; fi; }
nginx_bin() { command -v nginx || { [[ -x /usr/sbin/nginx ]] && echo /usr/sbin/nginx; } || true; }

ensure_tools() {
  local log=$1 tool
  shift
  local missing=()
  for tool in "$@"; do
    case $tool in
      nginx-light) [[ -n $(nginx_bin) ]] || missing+=(nginx-light) ;;
      *) command -v "$tool" >/dev/null || missing+=("$tool") ;;
    esac
  done
  ((${#missing[@]})) || return 0
  printf '%s: installing %s with apt-get (missing)\n' "$(basename "$0")" "${missing[*]}" >&2
  local own_policy=
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee /usr/sbin/policy-rc.d >/dev/null
    as_root chmod +x /usr/sbin/policy-rc.d
    own_policy=1
  fi
  as_root apt-get update -qq
  if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >"$log" 2>&1; then
    printf '%s: nginx-light did not install; trying nginx\n' "$(basename "$0")" >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]/nginx-light/nginx}" >>"$log" 2>&1
  fi
  [[ -n $own_policy ]] && as_root rm -f /usr/sbin/policy-rc.d
  return 0
}

declare -a started_pids=()
stop_started() {
  local wait=${1:-5} pid
  for pid in "${started_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${started_pids[@]}"; do
    for _ in $(seq $((wait * 10))); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  done
}

# nginx_conf_in PORT DIR WORKERS WORKER_CONNECTIONS BACKLOG HEADER_MS IDLE_MS SEND_MS WHO:
# writes DIR/nginx.conf, nginx as the scripts run it beside shardwheel-httpd, with the same
# timeouts: WORKERS processes, each listening on 127.0.0.1:PORT (reuseport: a listener per
# worker, as shardwheel-httpd has one per thread or process), `return 200` on `/`. WHO names
# the script.
nginx_conf_in() {
  local port=$1 dir=$2 workers=$3 conns=$4 backlog=$5 header_ms=$6 idle_ms=$7 send_ms=$8 who=$9
  local user=
  [[ $EUID -eq 0 ]] && user="user nobody nogroup;"
  mkdir -p "$dir/logs"
  cat >"$dir/nginx.conf" <<EOF
# Written by $who: $workers workers, the same timeouts as shardwheel-httpd, return 200.
$user
worker_processes $workers;
worker_rlimit_nofile 20000;
daemon off;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections $conns; }
http {
    access_log off;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    client_header_timeout ${header_ms}ms;
    keepalive_timeout ${idle_ms}ms;
    send_timeout ${send_ms}ms;
    # shardwheel-httpd resets a connection it closes at the send timeout (the kernel drops
    # what the client never took): the same here (and the unread client sees the close).
    reset_timedout_connection on;
    # shardwheel-httpd caps neither: without this, nginx closes a wrk connection every 1000
    # requests (its default) and wrk reconnects.
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$port backlog=$backlog reuseport;
        location / { return 200 "hello from nginx\n"; }
    }
}
EOF
}
