#!/usr/bin/env bash
# Run a command with the local stack up and its addresses exported. Starts the stack if it
# is not running and, in that case only, stops it afterwards, even when the command fails.
set -euo pipefail
cd "$(dirname "$0")/.."
cli=.venv/bin/coach-stream

started_here=no
if ! "$cli" stack status >/dev/null 2>&1; then
  started_here=yes
fi
cleanup() {
  if [ "$started_here" = yes ]; then "$cli" stack down || true; fi
}
trap cleanup EXIT INT TERM

"$cli" stack up
eval "$("$cli" stack env)"
export COACH_STREAM_REQUIRE_SERVICES=1
"$@"
