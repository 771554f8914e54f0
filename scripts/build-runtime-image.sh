#!/usr/bin/env bash
# Build coach-stream/runtime:<version>, the image Nomad's docker driver runs, without an image
# registry: the offline twin of the repository's Dockerfile.
#
#   scripts/build-runtime-image.sh          build or reuse; prints the image name on stdout
#   scripts/build-runtime-image.sh --force  rebuild the image (the root filesystem stays cached)
#
# 1. Root filesystem: `debootstrap --variant=minbase` of Debian bookworm with Debian's Python 3
#    (3.11, the version the project targets), made once and cached (scripts/images.sh).
# 2. The project: its wheel, built from this checkout, and the wheels of its dependencies,
#    resolved from PyPI by the pip of the project's .venv (its cache and settings), installed
#    into a virtual environment at /opt/coach-stream/venv inside the root filesystem (chroot).
#    triton is removed again: it is torch.compile's GPU compiler, which no task uses, and it
#    is a gigabyte of every container (the vfs storage driver copies the whole image per
#    container). PyPI's torch keeps its CUDA libraries, so the same image runs a GPU trainer.
# 3. The image: the root filesystem `docker import`ed in one layer, with the Dockerfile's user
#    (coach, uid 10001), working directory, entrypoint and default command
#    (tests/integration/test_runtime_image.py keeps the two in agreement).
# The image carries the key of its inputs (the root filesystem, these scripts, pyproject.toml
# and the package's files); a rebuild with nothing changed takes seconds. It holds no
# credentials and no test code: the wheel is the package alone, and the check below refuses
# a build where either slipped in.
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=bookworm
PACKAGES=python3,python3-venv,ca-certificates,passwd
VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n1)"
IMAGE="${COACH_STREAM_RUNTIME_IMAGE_NAME:-coach-stream/runtime:$VERSION}"
VENV=/opt/coach-stream/venv
NUMBA_CACHE=/opt/coach-stream/numba-cache
USER_NAME=coach
USER_ID=10001
force=no
[ "${1:-}" = --force ] && force=yes
NAME=build-runtime-image
# shellcheck source=scripts/images.sh
. scripts/images.sh
python=.venv/bin/python
[ -x "$python" ] || die "no .venv here: run \`make setup\` first (its pip resolves the image's wheels)."

# --- 1. root filesystem -----------------------------------------------------------------------
read -r rootfs_key tarball < <(debian_rootfs "$SUITE" "$PACKAGES" python3 'python3 -c "import venv, ensurepip"')
[ -n "${tarball:-}" ] || exit 1

image_key="$(
  {
    echo "$rootfs_key"
    sha256sum scripts/build-runtime-image.sh scripts/images.sh pyproject.toml README.md
    find -L coach_stream -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum
  } | sha
)"
if [ "$force" = no ] && [ "$(label_of "$IMAGE" io.coachstream.inputs)" = "$image_key" ]; then
  say "$IMAGE is up to date (inputs $image_key)"
  echo "$IMAGE"
  exit 0
fi

# --- 2. the project and its dependencies ------------------------------------------------------
start=$SECONDS
say "building $IMAGE (inputs $image_key)"
target="$workdir/rootfs"
mkdir -p "$target"
tar -C "$target" -xf "$tarball"
# The package's schemas/ is a link to the top-level folder; in the wheel it is the folder.
src="$workdir/src"
mkdir -p "$src"
cp -rL pyproject.toml README.md schemas coach_stream "$src/"
find "$src" -name __pycache__ -prune -exec rm -rf {} +
"$python" -m pip wheel --quiet --no-deps -w "$workdir/dist" "$src" >&2 \
  || die "the project's wheel did not build (above)"
wheel="$(ls "$workdir"/dist/coach_stream-*.whl)"
wheels="$target/tmp/wheels"
say "resolving the wheels of $(basename "$wheel") and its dependencies"
"$python" -m pip wheel --quiet -w "$wheels" "$wheel" >&2 \
  || die "the dependencies' wheels could not be had (above); check the package index"
mount -t proc proc "$target/proc"
# The chroot gets a clean environment: this machine's pip settings name host paths.
in_root() { chroot "$target" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }
in_root python3 -m venv "$VENV"
say "installing into $VENV"
in_root PIP_NO_CACHE_DIR=1 "$VENV/bin/pip" install --quiet --no-index \
  --find-links /tmp/wheels --disable-pip-version-check "/tmp/wheels/$(basename "$wheel")" >&2 \
  || die "installing the wheels failed (above)"
in_root "$VENV/bin/pip" uninstall --quiet -y triton >&2
in_root useradd --create-home --uid "$USER_ID" "$USER_NAME"
# numba's cache of the compiled act and chunker step, filled now so that no task compiles
# them (~8 s) on its first step; the image's user may write it (numba checks that a cache
# folder is writable).
in_root NUMBA_CACHE_DIR="$NUMBA_CACHE" "$VENV/bin/python" -m coach_stream.rollout.compiled >&2 \
  || die "the compiled act and chunker step did not compile (above)"
in_root chown -R "$USER_ID" "$NUMBA_CACHE"
# The check: the CLI imports, with torch and the environments, as the image's user would.
in_root "$VENV/bin/python" -c 'import importlib.resources as r, coach_stream.cli.main, torch, gymnasium, ale_py, mujoco; assert any(p.name.endswith(".avsc") for p in r.files("coach_stream").joinpath("schemas").iterdir()), "no schemas"' >&2 \
  || die "the installed project does not import (above)"
umount "$target/proc"
rm -rf "$wheels" "$target"/root/.cache
# No test code: the project's wheel holds the package alone (its tests and the Nomad double
# stay in the repository), and no credential file comes with it.
"$python" - "$wheel" <<'PY' || die "the wheel holds more than the package (above)"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
stray = [n for n in names if not n.startswith(("coach_stream/", "coach_stream-"))
         or "/tests/" in n or n.endswith((".env", ".pem", ".key", "credentials.json"))]
if stray:
    sys.exit(f"unexpected files in the wheel: {stray[:5]}")
PY

# --- 3. the image -----------------------------------------------------------------------------
say "importing the root filesystem ($(du -sh "$target" | cut -f1)) as $IMAGE"
tar --numeric-owner -C "$target" -c . | docker_cli import \
  --change "LABEL io.coachstream.inputs=$image_key" \
  --change "LABEL org.opencontainers.image.version=$VERSION" \
  --change "ENV PATH=$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change 'ENV PYTHONDONTWRITEBYTECODE=1' \
  --change "ENV NUMBA_CACHE_DIR=$NUMBA_CACHE" \
  --change 'ENV PYTHONUNBUFFERED=1' \
  --change 'ENV PIP_NO_CACHE_DIR=1' \
  --change "USER $USER_NAME" \
  --change "WORKDIR /home/$USER_NAME" \
  --change 'ENTRYPOINT []' \
  --change 'CMD ["python", "-m", "coach_stream.cli.main", "--help"]' \
  - "$IMAGE" >/dev/null
rm -rf "$target"
# Superseded builds of the tag are dangling images now; drop them (vfs makes each one large).
docker_cli image prune -f --filter "label=io.coachstream.inputs" >/dev/null 2>&1 || true
say "built $IMAGE in $((SECONDS - start)) s"
echo "$IMAGE"
