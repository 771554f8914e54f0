#!/usr/bin/env bash
# Build coach-stream/kafka:4.4.0 without an image registry, and reuse everything already built.
#
#   scripts/build-kafka-image.sh          build or reuse; prints the image name on stdout
#   scripts/build-kafka-image.sh --force  rebuild the image (the root filesystem stays cached)
#
# 1. Root filesystem: `debootstrap --variant=minbase` of Debian bookworm with
#    openjdk-17-jre-headless, from the machine's configured Debian mirror ($DEBIAN_MIRROR to
#    override), packed as a tarball under the cache dir. Made once (minutes), kept by a key of
#    its inputs.
# 2. Base image: the tarball `docker import`ed as coach-stream/kafka-base:bookworm-jre17.
# 3. Image: coach_stream/stack/kafka_image/Dockerfile adds the Kafka jars `coach-stream stack` resolved from Maven
#    Central (resolved here first if the cache lacks them) and the entrypoint.
# Each step is skipped when its output carries the key of its current inputs, so a rebuild
# with nothing changed takes seconds. Needs a Docker engine (DOCKER_HOST); when none answers,
# the project's own engine (scripts/docker-engine.sh) is started and stopped again at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

KAFKA_VERSION=4.4.0
SUITE=bookworm
PACKAGES=openjdk-17-jre-headless
IMAGE="${COACH_STREAM_KAFKA_IMAGE_NAME:-coach-stream/kafka:$KAFKA_VERSION}"
BASE_IMAGE=coach-stream/kafka-base:$SUITE-jre17
libs_rel="kafka/$KAFKA_VERSION/libs"
force=no
[ "${1:-}" = --force ] && force=yes
NAME=build-kafka-image
# shellcheck source=scripts/images.sh
. scripts/images.sh
libs="$cache/$libs_rel"

# --- the Kafka jars ---------------------------------------------------------------------------
if [ ! -f "$libs/.complete" ]; then
  say "resolving the Kafka $KAFKA_VERSION jars from Maven Central (once)"
  python=.venv/bin/python
  [ -x "$python" ] || python=python3
  "$python" -c 'import sys; from pathlib import Path; from coach_stream.stack.kafka import provision; provision(Path(sys.argv[1]), Path(sys.argv[2]))' \
    "$libs" "$cache/kafka/provision.log" || die "the Kafka jars could not be resolved (see $cache/kafka/provision.log)"
fi

# --- 1. root filesystem -----------------------------------------------------------------------
# (Running java needs /proc, so the check looks at the installed binary; the tests run it.)
read -r rootfs_key tarball < <(debian_rootfs "$SUITE" "$PACKAGES" jre17 'test -x "$(readlink -f /usr/bin/java)"')
[ -n "${tarball:-}" ] || exit 1

# --- 2. base image ----------------------------------------------------------------------------
if [ "$(label_of "$BASE_IMAGE" io.coachstream.rootfs)" != "$rootfs_key" ]; then
  say "importing the root filesystem as $BASE_IMAGE"
  docker_cli import \
    --change "LABEL io.coachstream.rootfs=$rootfs_key" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$tarball" "$BASE_IMAGE" >/dev/null
fi

# --- 3. the Kafka image -----------------------------------------------------------------------
# The key: the base, the build context files, and the jars (names and sizes; a jar's name
# carries its version).
image_key="$(
  {
    echo "$rootfs_key"
    sha256sum scripts/build-kafka-image.sh scripts/images.sh
    (cd coach_stream/stack/kafka_image && sha256sum Dockerfile run server.properties log4j2.yaml tools-log4j2.yaml)
    (cd "$libs" && find . -name '*.jar' -printf '%p %s\n' | sort)
  } | sha
)"
if [ "$force" = no ] && [ "$(label_of "$IMAGE" io.coachstream.inputs)" = "$image_key" ]; then
  say "$IMAGE is up to date (inputs $image_key)"
  echo "$IMAGE"
  exit 0
fi
say "building $IMAGE"
context="$workdir/context"
overlay="$context/overlay"
mkdir -p "$overlay/opt/kafka/libs" "$overlay/opt/kafka/config" "$overlay/etc/kafka/docker"
cp coach_stream/stack/kafka_image/Dockerfile "$context/"
cp coach_stream/stack/kafka_image/run coach_stream/stack/kafka_image/server.properties \
  coach_stream/stack/kafka_image/log4j2.yaml coach_stream/stack/kafka_image/tools-log4j2.yaml \
  "$overlay/etc/kafka/docker/"
chmod 0755 "$overlay/etc/kafka/docker/run"
cp "$libs"/*.jar "$overlay/opt/kafka/libs/"
# The classic builder: one COPY step, and it needs no buildx plugin.
DOCKER_BUILDKIT=0 docker_cli build --quiet \
  --build-arg "BASE=$BASE_IMAGE" \
  --label "io.coachstream.inputs=$image_key" \
  --label "org.apache.kafka.version=$KAFKA_VERSION" \
  -t "$IMAGE" "$context" >/dev/null
# Superseded builds of the tag are dangling images now; drop them (vfs makes each one large).
docker_cli image prune -f --filter "label=io.coachstream.inputs" >/dev/null 2>&1 || true
say "built $IMAGE (inputs $image_key)"
echo "$IMAGE"
