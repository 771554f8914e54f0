"""``coach_stream.processes`` with real child processes: detached start and group termination.

No Kafka or GCS here; these start processes, so they are not unit tests.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from coach_stream import processes
from coach_stream.processes import ProcessRecord
from coach_stream.testing.waiting import wait_until

SLEEPER = "import time; print('ready', flush=True); time.sleep(60)"
IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(60)"
)


def start(code: str, log: Path) -> ProcessRecord:
    """A detached Python child, once it has printed 'ready' (its signal handlers are set)."""
    record = processes.spawn([sys.executable, "-c", code], log)
    wait_until(lambda: "ready" in log.read_text())
    return record


def test_a_started_process_is_ours_until_stopped(tmp_path: Path) -> None:
    record = start(SLEEPER, tmp_path / "child.log")
    assert record.is_alive()
    assert processes.group_members(record) == [record.pid]
    processes.stop(record, grace_s=5)
    assert not record.is_alive()
    assert processes.process_start_time(record.pid) is None
    assert processes.group_members(record) == []


def test_a_detached_child_has_its_own_session_no_stdin_and_the_given_env(tmp_path: Path) -> None:
    code = (
        "import os, sys; "
        "print(os.getsid(0) == os.getpid(), repr(sys.stdin.read()), os.environ['PROBE'])"
    )
    log = tmp_path / "child.log"
    with log.open("ab") as out:
        child = processes.popen_detached([sys.executable, "-c", code], out, {"PROBE": "42"})
    assert child.wait(timeout=30) == 0
    assert log.read_text().split() == ["True", "''", "42"]


def test_stop_ends_what_the_leader_left_behind(tmp_path: Path) -> None:
    # The leader forks a sleeper into its group and exits: its pid alone says "gone",
    # but the group still holds a process that `stop` must end.
    log = tmp_path / "leader.log"
    code = (
        "import subprocess, sys; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(child.pid, flush=True)"
    )
    record = processes.spawn([sys.executable, "-c", code], log)
    wait_until(lambda: log.read_text().strip().isdigit() and not record.is_alive())
    orphan = int(log.read_text())
    assert processes.group_members(record) == [orphan]
    processes.stop(record, grace_s=5)
    assert processes.process_start_time(orphan) is None
    assert processes.group_members(record) == []


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    stubborn = start(IGNORES_SIGTERM, tmp_path / "stubborn.log")
    polite = start(SLEEPER, tmp_path / "polite.log")
    began = time.monotonic()
    killed = processes.terminate_groups([stubborn, polite], grace_s=2.0)
    assert killed == [stubborn]  # the polite one ended on SIGTERM
    assert time.monotonic() - began >= 2.0  # the stubborn one got its full grace first
    assert not stubborn.is_alive()
    assert not polite.is_alive()


def test_a_reused_pid_is_left_alone(tmp_path: Path) -> None:
    # A record whose process started one tick before the one now holding its pid: the
    # pid was reused by a stranger, which neither counts as a member nor gets a signal.
    stranger = start(SLEEPER, tmp_path / "stranger.log")
    ours = ProcessRecord(pid=stranger.pid, start_time=stranger.start_time - 1)
    try:
        assert processes.group_members(ours) == []
        assert processes.terminate_groups([ours], grace_s=0.1) == []
        processes.stop(ours, grace_s=0.1)
        assert stranger.is_alive()
    finally:
        processes.stop(stranger, grace_s=5)
    assert not stranger.is_alive()
