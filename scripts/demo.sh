#!/usr/bin/env bash
# The main job: a real distributed run on the local stack. A trainer, two rollout workers and
# an evaluator, each its own process, connected only through Kafka and the checkpoint store
# (GCS API, served by the stack's fake-gcs-server), trained until CartPole-v1 is solved.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/coach-stream launch "${PRESET:-cartpole-ppo}" --workers "${WORKERS:-2}" \
  --checkpoints "gs://coach-stream" "$@"
