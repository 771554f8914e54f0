#!/usr/bin/env bash
# The main job until the training loop lands: show the stack is up and healthy.
set -euo pipefail
.venv/bin/coach-stream stack status
