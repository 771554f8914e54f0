"""``rollout.niceness``: workers give up CPU priority (nice and their session's autogroup)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from coach_stream.config import load_preset
from coach_stream.errors import ConfigError

PROBE = """
import os, sys
from pathlib import Path
from coach_stream.rollout.priority import yield_cpu
yield_cpu(int(sys.argv[1]))
group = Path("/proc/self/autogroup")
fields = group.read_text().split() if group.exists() else []  # CI shows it empty
print(os.getpriority(os.PRIO_PROCESS, 0), fields[-1] if fields else "-")
"""
INHERITED = os.getpriority(os.PRIO_PROCESS, 0)  # CI may run the whole suite under nice
AUTOGROUP = Path("/proc/self/autogroup")


def _autogroup_text() -> str:
    """This process's autogroup line; empty without autogroup scheduling. CI's kernel shows
    the file with no line in it (a task outside any autogroup prints nothing)."""
    try:
        return AUTOGROUP.read_text()
    except OSError:
        return ""


def _lowered(niceness: int) -> int:
    return min(19, INHERITED + niceness)


def _probe(niceness: int, own_session: bool) -> tuple[int, str]:
    """(nice, autogroup nice) of a fresh process after ``yield_cpu(niceness)``."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(niceness)],
        capture_output=True, text=True, start_new_session=own_session,
    )  # fmt: skip
    assert done.returncode == 0, f"the probe exited {done.returncode}: {done.stderr}"
    nice, group = done.stdout.split()
    return int(nice), group


@pytest.mark.skipif(not _autogroup_text().strip(), reason="no autogroup scheduling")
def test_a_task_in_its_own_session_lowers_its_nice_and_its_autogroup() -> None:
    assert _probe(7, own_session=True) == (_lowered(7), "7")
    assert _probe(0, own_session=True) == (INHERITED, "0")  # the default gives nothing up


def test_a_process_sharing_a_session_leaves_the_sessions_group_alone() -> None:
    before = _autogroup_text()
    nice, _ = _probe(5, own_session=False)
    assert nice == _lowered(5)
    assert _autogroup_text() == before  # this test's own session was not slowed down


def test_niceness_is_validated_at_the_preset_door() -> None:
    assert load_preset("pong-ppo").rollout.niceness == 10
    assert load_preset("cartpole-ppo").rollout.niceness == 0
    with pytest.raises(ConfigError, match=r"'rollout\.niceness'"):
        load_preset("cartpole-ppo", ["rollout.niceness=20"])
