"""The stack's process handling, with a real child process."""

from __future__ import annotations

import sys
from pathlib import Path

from coach_stream import processes


def test_a_started_process_is_ours_until_stopped(tmp_path: Path) -> None:
    record = processes.spawn(
        [sys.executable, "-c", "import time; print('hi', flush=True); time.sleep(60)"],
        tmp_path / "child.log",
    )
    assert record.is_alive()
    processes.stop(record, grace_s=5)
    assert not record.is_alive()
    assert processes.process_start_time(record.pid) is None
