#!/usr/bin/env bash
# A Docker engine of the project's own, for the testcontainers tests on a machine without one.
#
#   scripts/docker-engine.sh up     install docker.io if dockerd is missing (root, apt), start dockerd
#   scripts/docker-engine.sh down   stop the dockerd that `up` started (never one it did not start)
#   scripts/docker-engine.sh env    print `export DOCKER_HOST=...` for this engine
#   scripts/docker-engine.sh status exit 0 when the engine answers
#
# The engine is private: its socket, data root and exec root live under the project cache dir
# ($COACH_STREAM_CACHE, else $XDG_CACHE_HOME/coach-stream, else ~/.cache/coach-stream), so it
# never touches a system engine. It runs with `--storage-driver vfs` (works on any file system,
# inside containers and VMs alike), `--iptables=false --bridge=none`: no bridge network and no
# NAT rules, so containers can only use host networking and every connection stays on 127.0.0.1.
set -euo pipefail

cache="${COACH_STREAM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/coach-stream}"
root="$cache/docker"
sock="$root/docker.sock"
pidfile="$root/dockerd.pid"
log="$root/dockerd.log"
export DOCKER_HOST="unix://$sock"

# The docker.io package's own client: it matches the daemon's API version.
docker_cli() {
  if [ -x /usr/bin/docker ]; then /usr/bin/docker "$@"; else docker "$@"; fi
}

answers() { docker_cli version >/dev/null 2>&1; }

install_engine() {
  command -v dockerd >/dev/null 2>&1 && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "dockerd is not installed and this is not root: install Docker (e.g. \`sudo apt-get install docker.io\`) or set DOCKER_HOST to a running engine." >&2
    exit 2
  fi
  echo "installing docker.io from the Debian mirror ..." >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io >&2 \
    || { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io >&2; }
}

up() {
  if answers; then return 0; fi
  install_engine
  if [ "$(id -u)" != 0 ]; then
    echo "dockerd must run as root here (vfs storage, host networking); run as root or set DOCKER_HOST to a running engine." >&2
    exit 2
  fi
  mkdir -p "$root/data" "$root/exec"
  rm -f "$sock"
  # setsid: the engine outlives this shell (the Makefile stops it explicitly with `down`).
  setsid dockerd \
    --host "unix://$sock" \
    --data-root "$root/data" \
    --exec-root "$root/exec" \
    --pidfile "$pidfile" \
    --storage-driver vfs \
    --iptables=false --ip6tables=false --ip-masq=false --bridge=none \
    >"$log" 2>&1 </dev/null &
  for _ in $(seq 1 120); do
    if answers; then return 0; fi
    if ! kill -0 $! 2>/dev/null; then break; fi
    sleep 0.5
  done
  echo "dockerd did not start; its last log lines ($log):" >&2
  tail -n 20 "$log" >&2
  exit 1
}

down() {
  [ -f "$pidfile" ] || return 0
  pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  rm -f "$pidfile" "$sock"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) echo "export DOCKER_HOST=$DOCKER_HOST" ;;
  status) answers ;;
  *) echo "usage: $0 up|down|env|status" >&2; exit 2 ;;
esac
