#!/usr/bin/env bash
# A Docker engine of the project's own, for the testcontainers tests on a machine without one.
#
#   scripts/docker-engine.sh up     install docker.io if dockerd is missing (root, apt), start dockerd
#   scripts/docker-engine.sh down   stop the dockerd that `up` started (never one it did not start)
#   scripts/docker-engine.sh env    print `export DOCKER_HOST=...` for this engine
#   scripts/docker-engine.sh status exit 0 when the engine answers
#   scripts/docker-engine.sh driver print the running engine's storage driver
#
# The engine is private: its socket, data root and exec root live under the project cache dir
# ($COACH_STREAM_CACHE, else $XDG_CACHE_HOME/coach-stream, else ~/.cache/coach-stream), so it
# never touches a system engine. It runs with `--iptables=false --bridge=none`: no bridge
# network and no NAT rules, so containers can only use host networking and every connection
# stays on 127.0.0.1.
#
# Storage driver: overlay2 where this kernel mounts an overlay on the data root's file system
# (probed with a real mount), else vfs, which works anywhere but copies the whole image for
# every container (5.7 GB for the runtime image: four containers ran a CI machine out of disk).
# COACH_STREAM_DOCKER_STORAGE_DRIVER=vfs|overlay2 forces one. When the driver changes, the
# other driver's store is deleted: its images are invisible to this one and only take disk.
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

# overlay2 when a real overlay mount works beside the data root, else vfs.
pick_driver() {
  if [ -n "${COACH_STREAM_DOCKER_STORAGE_DRIVER:-}" ]; then
    echo "$COACH_STREAM_DOCKER_STORAGE_DRIVER"
    return 0
  fi
  local probe
  probe="$(mktemp -d "$root/overlay-probe.XXXXXX")"
  mkdir -p "$probe/lower" "$probe/upper" "$probe/work" "$probe/merged"
  echo probe >"$probe/lower/file"
  local driver=vfs
  if mount -t overlay overlay -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" \
    "$probe/merged" 2>/dev/null; then
    if [ "$(cat "$probe/merged/file" 2>/dev/null)" = probe ] && echo written >"$probe/merged/file" \
      && [ "$(cat "$probe/lower/file")" = probe ]; then
      driver=overlay2
    fi
    umount "$probe/merged" 2>/dev/null || true
  fi
  rm -rf "$probe"
  echo "$driver"
}

# Start dockerd with one storage driver; 0 when it answers, 1 when it exited or never answered.
start_dockerd() {
  local driver="$1"
  rm -f "$sock"
  # setsid: the engine outlives this shell (the Makefile stops it explicitly with `down`).
  setsid dockerd \
    --host "unix://$sock" \
    --data-root "$root/data" \
    --exec-root "$root/exec" \
    --pidfile "$pidfile" \
    --storage-driver "$driver" \
    --iptables=false --ip6tables=false --ip-masq=false --bridge=none \
    >"$log" 2>&1 </dev/null &
  local pid=$!
  for _ in $(seq 1 120); do
    if answers; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then return 1; fi
    sleep 0.5
  done
  return 1
}

# A store left by the other driver holds images this engine cannot see: reclaim its disk.
drop_other_store() {
  local driver="$1" other
  for other in vfs overlay2; do
    [ "$other" = "$driver" ] && continue
    if [ -d "$root/data/$other" ] || [ -d "$root/data/image/$other" ]; then
      echo "docker-engine: storage driver is $driver now; deleting the $other store ($(du -sh "$root/data/$other" 2>/dev/null | cut -f1))" >&2
      rm -rf "${root:?}/data/$other" "${root:?}/data/image/$other"
    fi
  done
}

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
    echo "dockerd must run as root here (its own storage and host networking); run as root or set DOCKER_HOST to a running engine." >&2
    exit 2
  fi
  mkdir -p "$root/data" "$root/exec"
  local driver
  driver="$(pick_driver)"
  if ! start_dockerd "$driver" && [ "$driver" = overlay2 ] \
    && [ -z "${COACH_STREAM_DOCKER_STORAGE_DRIVER:-}" ]; then
    echo "docker-engine: dockerd did not start with overlay2 ($(tail -n 1 "$log")); using vfs" >&2
    down
    driver=vfs
    start_dockerd "$driver" || true
  fi
  if ! answers; then
    echo "dockerd did not start (storage driver $driver); its last log lines ($log):" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
  drop_other_store "$driver"
  echo "docker-engine: dockerd up, storage driver $driver" >&2
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
  driver)
    answers || { echo "no Docker engine answers at $DOCKER_HOST; start it with \`$0 up\`." >&2; exit 1; }
    docker_cli info --format '{{.Driver}}' ;;
  *) echo "usage: $0 up|down|env|status|driver" >&2; exit 2 ;;
esac
