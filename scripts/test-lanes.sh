#!/usr/bin/env bash
# The suite in two lanes. The fast lane (unit, fuzz, the Nomad double's own tests, the CLI's
# bad-input cases: about 800 tests that start no service of their own and share no state)
# runs on both cores with pytest-xdist; everything else (the integration, CLI and fault
# suites, which share the stack's one broker, restart it, or time a run) runs one test at a
# time. Every test runs in exactly one lane.
# On 2 cores the fast lane takes about 115 s instead of 315 s one at a time.
#
#   bash scripts/test-lanes.sh fast [PYTEST ARGS]   the fast lane alone (`make unit`)
#   bash scripts/test-lanes.sh all                  both lanes; the second runs even when the
#                                                   first fails; exits non-zero if either did
#   bash scripts/test-lanes.sh all --kafka-suites-elsewhere
#                                                   both lanes without scripts/kafka-suites.txt:
#                                                   `make test` runs those against
#                                                   testcontainers Kafka right after, so once
set -uo pipefail
cd "$(dirname "$0")/.."
pytest=.venv/bin/pytest
fast=(tests/unit tests/fuzz tests/nomad_double tests/cli/test_bad_input.py)
# Run one at a time even though they need no service: the zygote server's tests watch
# processes come and go, and once, with the lane on two workers, an idle zygote's log was
# left behind (a clean exit removes it); they passed 20 of 20 under load one at a time.
solo=(tests/unit/orchestrators/test_zygote_server.py)

case "${1:-}" in
  fast)
    shift
    exec "$pytest" -n 2 -q -p no:cacheprovider "${fast[@]}" "$@"
    ;;
  all)
    shift
    elsewhere=()
    if [ "${1:-}" = --kafka-suites-elsewhere ]; then
      shift
      mapfile -t elsewhere < <(grep -v -e '^#' -e '^$' scripts/kafka-suites.txt)
    fi
    status=0
    "$pytest" -n 2 -q -p no:cacheprovider "${fast[@]}" "${solo[@]/#/--ignore=}" || status=$?
    "$pytest" "${solo[@]}" tests -q --durations=15 "${fast[@]/#/--ignore=}" \
      "${elsewhere[@]/#/--deselect=}" "$@" || status=$?
    exit "$status"
    ;;
  *)
    echo "usage: bash scripts/test-lanes.sh fast [PYTEST ARGS] | all" >&2
    exit 2
    ;;
esac
