# httpd/tools.sh: sourced by httpd/bench.sh and httpd/scale.sh (not run by itself).
#
# ensure_tools LOG TOOL...: installs with apt-get each of TOOL (Debian package names) whose
# command is missing, saying so; nginx-light stands for nginx (and falls back to the full
# package). Debian starts an installed nginx as a service on port 80 unless policy-rc.d says
# no: it says no for the install. The install's output goes to LOG.
# nginx_bin: the nginx binary, or nothing.
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
