"""The replay library stands on the codec and transport, never on the CLI."""

from __future__ import annotations

import subprocess
import sys


def test_the_replay_reader_does_not_import_the_cli() -> None:
    code = (
        "import sys, coach_stream.replay.reader, coach_stream.replay.inspect; "
        "print(sorted(m for m in sys.modules if m.startswith('coach_stream.cli')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_resolve_topic_takes_a_run_id_or_a_full_topic_name() -> None:
    from coach_stream.replay.reader import resolve_topic

    assert resolve_topic("r1") == "coach-stream.r1.experience"
    assert resolve_topic("coach-stream.r1.experience") == "coach-stream.r1.experience"
