# shellcheck shell=bash
# What the offline image builds share (sourced by build-kafka-image.sh and
# build-runtime-image.sh): the Docker engine, the Debian mirror, and a cached debootstrap root
# filesystem. The caller sets NAME (for messages) before sourcing, and gets:
#   cache, workdir          the project cache dir; a scratch dir removed at exit
#   docker_cli, label_of    the engine's client; an image's label ("" when absent)
#   sha                     a 16-hex key of standard input
#   debian_rootfs SUITE PACKAGES CHECK
#                           the path of a `debootstrap --variant=minbase` tarball of SUITE with
#                           PACKAGES, made once and kept by a key of its inputs; CHECK is run in
#                           the chroot before the tarball is kept
# A Docker engine must answer (DOCKER_HOST); when none does, the project's own
# (scripts/docker-engine.sh) is started here and stopped again at exit.

cache="${COACH_STREAM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/coach-stream}"

say() { echo "$NAME: $*" >&2; }
die() { echo "$NAME: $*" >&2; exit 1; }
docker_cli() { if [ -x /usr/bin/docker ]; then /usr/bin/docker "$@"; else docker "$@"; fi; }
sha() { sha256sum | cut -c1-16; }
label_of() { docker_cli image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true; }

started_engine=no
if ! docker_cli version >/dev/null 2>&1; then
  say "no Docker engine answers${DOCKER_HOST:+ at $DOCKER_HOST}; starting the project's own"
  eval "$(scripts/docker-engine.sh env)"
  if ! docker_cli version >/dev/null 2>&1; then
    scripts/docker-engine.sh up
    started_engine=yes
  fi
fi
workdir="$(mktemp -d)"
images_cleanup() {
  # A chroot's /proc mount must go before its directory can.
  if mountpoint -q "$workdir/rootfs/proc" 2>/dev/null; then umount "$workdir/rootfs/proc"; fi
  rm -rf "$workdir"
  if [ "$started_engine" = yes ]; then scripts/docker-engine.sh down; fi
}
trap images_cleanup EXIT INT TERM

debian_mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  local mirror
  # The first Debian (not security) mirror apt is configured with, deb822 or one-line format.
  mirror="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {print $2}' | grep -v security | head -n1 || true)"
  [ -n "$mirror" ] || mirror="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '$1 == "deb" && $2 !~ /^\[/ {print $2}' | grep -v security | grep debian | head -n1 || true)"
  echo "${mirror:-http://deb.debian.org/debian}"
}

# debian_rootfs SUITE PACKAGES TAG CHECK: prints the tarball's path; its key is on fd 3 too.
debian_rootfs() {
  local suite="$1" packages="$2" tag="$3" check="$4"
  local dir="$cache/docker/rootfs" key tarball mirror target
  # The key names what the tarball is made of; the mirror is not part of it (same packages).
  key="$(printf '%s\n' "$suite" minbase "$packages" "$(uname -m)" v1 | sha)"
  tarball="$dir/$suite-$tag-$key.tar"
  if [ ! -f "$tarball" ]; then
    command -v debootstrap >/dev/null 2>&1 || {
      [ "$(id -u)" = 0 ] || die "debootstrap is missing: install it (\`sudo apt-get install debootstrap\`) and run again."
      say "installing debootstrap"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >&2
    }
    [ "$(id -u)" = 0 ] || die "debootstrap needs root to make the root filesystem; run this once as root."
    mirror="$(debian_mirror)"
    say "making the $suite root filesystem with $packages from $mirror (once, a few minutes)"
    target="$workdir/debootstrap"
    debootstrap --variant=minbase --include="$packages" "$suite" "$target" "$mirror" >"$workdir/debootstrap.log" 2>&1 \
      || { tail -n 30 "$workdir/debootstrap.log" >&2; die "debootstrap failed (above); check that $mirror is reachable"; }
    # What a container never needs: package caches, docs, manuals, locales.
    rm -rf "$target"/var/cache/apt/archives/*.deb "$target"/var/lib/apt/lists/* \
      "$target"/usr/share/doc/* "$target"/usr/share/man/* "$target"/usr/share/locale/* \
      "$target"/var/log/* "$target"/tmp/*
    chroot "$target" /bin/sh -c "$check" \
      || die "the root filesystem fails its check \`$check\` (see $workdir/debootstrap.log)"
    mkdir -p "$dir"
    tar --numeric-owner -C "$target" -cf "$tarball.partial" .
    mv "$tarball.partial" "$tarball"
    rm -rf "$target"
    # Older tarballs of this kind (other keys) are dead weight.
    find "$dir" -name "$suite-$tag-*.tar" ! -name "$(basename "$tarball")" -delete
  fi
  echo "$key $tarball"
}
