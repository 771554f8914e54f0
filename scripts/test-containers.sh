#!/usr/bin/env bash
# `make test-containers`: the Kafka integration suites against testcontainers Kafka, and Nomad's
# docker driver running the project's runtime image (`-m nomad_docker`: those alone).
#
# Uses the Docker engine at DOCKER_HOST when one answers; otherwise starts the project's own
# (scripts/docker-engine.sh, installing docker.io when missing) and stops it at the end, even
# when the tests fail. Builds or reuses coach-stream/kafka:4.4.0 unless COACH_STREAM_KAFKA_IMAGE
# names another image. GCS comes from STORAGE_EMULATOR_HOST or the local stack's emulator (the
# fixtures start it and stop it again if they started it). Fails when any test is skipped or
# when a container is left behind (`docker ps -a` must be empty on an engine started here).
# Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."

docker_cli() { if [ -x /usr/bin/docker ]; then /usr/bin/docker "$@"; else docker "$@"; fi; }

engine_started=no
report="$(mktemp -d)"
cleanup() {
  if [ "$engine_started" = yes ]; then scripts/docker-engine.sh down; fi
  rm -rf "$report"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! docker_cli version >/dev/null 2>&1; then
  eval "$(scripts/docker-engine.sh env)"
  if ! docker_cli version >/dev/null 2>&1; then
    scripts/docker-engine.sh up || exit 1
    engine_started=yes
  fi
fi
echo "test-containers: Docker engine at ${DOCKER_HOST:-the default socket}"

if [ -z "${COACH_STREAM_KAFKA_IMAGE:-}" ]; then
  start=$SECONDS
  COACH_STREAM_KAFKA_IMAGE="$(scripts/build-kafka-image.sh)" || exit 1
  echo "test-containers: image $COACH_STREAM_KAFKA_IMAGE ready in $((SECONDS - start)) s"
fi
export COACH_STREAM_KAFKA_IMAGE
# The image Nomad's docker driver runs (tests/integration/test_nomad_docker.py).
if [ -z "${COACH_STREAM_RUNTIME_IMAGE:-}" ]; then
  start=$SECONDS
  COACH_STREAM_RUNTIME_IMAGE="$(scripts/build-runtime-image.sh)" || exit 1
  echo "test-containers: image $COACH_STREAM_RUNTIME_IMAGE ready in $((SECONDS - start)) s"
fi
export COACH_STREAM_RUNTIME_IMAGE

# On vfs every container is a full copy of its image: the docker-driver test runs up to four
# runtime containers at once. Say so before the run rather than as "no space left" inside it.
driver="$(docker_cli info --format '{{.Driver}}' 2>/dev/null || echo unknown)"
data_root="$(docker_cli info --format '{{.DockerRootDir}}' 2>/dev/null || true)"
echo "test-containers: storage driver $driver"
if [ "$driver" = vfs ] && [ -d "$data_root" ]; then
  image_bytes="$(docker_cli image inspect --format '{{.Size}}' "$COACH_STREAM_RUNTIME_IMAGE")"
  need_kb=$(((image_bytes * 4 / 1024) + 4 * 1024 * 1024))
  free_kb="$(df -Pk "$data_root" | awk 'NR == 2 {print $4}')"
  if [ "$free_kb" -lt "$need_kb" ]; then
    echo "test-containers: the vfs storage driver needs $((need_kb / 1024 / 1024)) GB free under $data_root for four runtime containers and $((free_kb / 1024 / 1024)) GB are; free disk, or run an engine with overlay2 (scripts/docker-engine.sh picks it where the kernel allows)." >&2
    exit 1
  fi
fi
export COACH_STREAM_KAFKA=testcontainers COACH_STREAM_REQUIRE_SERVICES=1
unset KAFKA_BOOTSTRAP_SERVERS

# The suites that talk to Kafka (scripts/kafka-suites.txt: the one list `make test` uses too).
mapfile -t suites < <(grep -v -e '^#' -e '^$' scripts/kafka-suites.txt)
.venv/bin/pytest -p no:cacheprovider -q -rs --junitxml="$report/junit.xml" "${suites[@]}" \
  "$@"
status=$?

# Passed means ran: a skipped test here is a testcontainers path that was not taken.
skipped="$(.venv/bin/python -c 'import sys, xml.etree.ElementTree as ET; r = ET.parse(sys.argv[1]).getroot(); print(sum(int(s.get("skipped", 0)) for s in r.iter("testsuite")))' "$report/junit.xml" 2>/dev/null || echo unknown)"
if [ "$skipped" != 0 ]; then
  echo "test-containers: $skipped test(s) skipped; every test here must run against testcontainers Kafka" >&2
  [ "$status" = 0 ] && status=1
fi

# Nothing may be left behind: on our own engine, no container at all; on a user's engine,
# none of ours.
if [ "$engine_started" = yes ]; then filter=(); else filter=(--filter label=io.coachstream.testcontainers); fi
left="$(docker_cli ps -aq "${filter[@]}")"
if [ -n "$left" ]; then
  echo "test-containers: containers left behind after the run:" >&2
  docker_cli ps -a "${filter[@]}" >&2
  # shellcheck disable=SC2086
  docker_cli rm -f $left >/dev/null
  [ "$status" = 0 ] && status=1
else
  echo "test-containers: docker ps -a: no containers left"
fi
exit "$status"
