#!/usr/bin/env bash
# Run a command with the local stack up and its addresses exported. Starts the stack if it
# is not running and, in that case only, stops it afterwards, even when the command fails
# or is interrupted. Exits with the command's exit code (130 after Ctrl-C, 143 after SIGTERM).
#
# `coach-stream stack status` exits 1 unless every service is healthy; that exit code is
# how this script knows whether it must start (and so later stop) the stack.
#
# The command gets a zygote of its own (docs/running.md, "A zygote that outlives launches"):
# COACH_STREAM_ZYGOTE_DIR points its launches at a fresh private socket directory, and the
# zygote they started there is stopped, and the directory removed, when the command ends,
# so nothing of the command's is left running. A user's own zygote is never touched.
set -euo pipefail
cd "$(dirname "$0")/.."
cli=.venv/bin/coach-stream

started_here=no
if ! "$cli" stack status >/dev/null 2>&1; then
  started_here=yes
fi
zygotes=$(mktemp -d "${TMPDIR:-/tmp}/coach-stream-zygote.XXXXXX")
export COACH_STREAM_ZYGOTE_DIR="$zygotes"
cleanup() {
  local code=$?
  trap - EXIT INT TERM
  # Only when a launch left a socket there: no interpreter start otherwise.
  if compgen -G "$zygotes/zygote-*.sock" >/dev/null; then
    .venv/bin/python -m coach_stream.orchestrators.zygote_server --stop >/dev/null || true
  fi
  rm -rf "$zygotes"  # a zygote still starting finds no directory to serve in, and exits
  if [ "$started_here" = yes ]; then "$cli" stack down || true; fi
  exit "$code"
}
trap cleanup EXIT
# A signal ends the script through the EXIT trap once, with the conventional exit code.
trap 'exit 130' INT
trap 'exit 143' TERM

"$cli" stack up
eval "$("$cli" stack env)"
export COACH_STREAM_REQUIRE_SERVICES=1
"$@"
