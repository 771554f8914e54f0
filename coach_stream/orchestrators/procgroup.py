"""Process groups: how a supervised task and everything it forked are found and ended.

Every task runs in its own session, so its pid is also its process-group id and the
group holds whatever the task forked (vector-env subprocesses, a data loader). Ending a
task means ending its group, otherwise `stop` would leave grandchildren behind. A
group's members are found through ``/proc`` rather than by trusting one pid, because the
leader may already be gone while its children live on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from coach_stream.stack.processes import ProcessRecord, process_start_time

__all__ = ["ProcessRecord", "group_members", "process_start_time", "terminate_groups"]


def _stat_fields(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; the fields after it are positional.
    return stat[stat.rindex(")") + 2 :].split()


def group_members(leader: ProcessRecord) -> list[int]:
    """Live (non-zombie) processes in ``leader``'s group that started no earlier than it.

    The start-time filter keeps a recycled group id from pointing at strangers: anything
    in the group that is older than our leader cannot have been forked by it.
    """
    members: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is None or fields[0] == "Z":
            continue
        if int(fields[2]) == leader.pid and int(fields[19]) >= leader.start_time:
            members.append(int(entry.name))
    return members


def _signal_group(leader: ProcessRecord, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader.pid, sig)


def terminate_groups(
    leaders: Iterable[ProcessRecord],
    grace_s: float,
    reap: Callable[[], None] = lambda: None,
    poll_s: float = 0.05,
) -> list[ProcessRecord]:
    """SIGTERM every group, SIGKILL what is left after ``grace_s``; return the groups killed.

    All groups get SIGTERM first and share one grace period, so stopping N tasks takes
    one grace period, not N. ``reap`` collects exit statuses of our own children (a
    zombie leader would otherwise look alive to the caller's ``Popen``).
    """
    pending = [leader for leader in leaders if group_members(leader)]
    for leader in pending:
        _signal_group(leader, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pending and time.monotonic() < deadline:
        reap()
        pending = [leader for leader in pending if group_members(leader)]
        if pending:
            time.sleep(poll_s)
    killed = list(pending)
    for leader in killed:
        _signal_group(leader, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while pending and time.monotonic() < deadline:
        reap()
        pending = [leader for leader in pending if group_members(leader)]
        if pending:
            time.sleep(poll_s)
    reap()
    return killed
