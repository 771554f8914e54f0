"""Local processes: how they are started detached, recognised later, and ended with their group.

Both the stack (Kafka, fake-gcs-server) and the local orchestrator (a run's supervisor
and tasks) start processes that outlive the command that started them, then stop them
from another command. Three rules, written once here:

- **Detached**: a started process gets its own session (so its pid is also its
  process-group id and the group holds whatever it forks), stdin from /dev/null and its
  output appended to a log file, so it neither reads from nor dies with the terminal.
- **Recognised by pid and start time**: a pid alone is not proof (pids are reused), so
  every started process is recorded with the start time the kernel reports for it, and
  it counts as ours only while that start time still matches.
- **Ended as a group**: SIGTERM to the whole group, SIGKILL to what is left after a
  grace period, so stopping a task also ends its grandchildren (vector-env
  subprocesses, a data loader). A group's members are found through ``/proc`` rather
  than by trusting one pid, because the leader may already be gone while its children
  live on.

The free-port helpers are here too: the stack picks the ports its processes listen on.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from coach_stream.errors import ServiceUnavailableError

__all__ = [
    "ProcessRecord",
    "free_port",
    "group_members",
    "parse_stat",
    "popen_detached",
    "port_is_free",
    "process_start_time",
    "require_free_port",
    "spawn",
    "stop",
    "tail",
    "terminate_groups",
]

# After SIGKILL a group normally vanishes within milliseconds; this only bounds the wait
# for a process stuck in uninterruptible sleep, which no signal can end sooner.
_KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class _Stat:
    """The fields of ``/proc/<pid>/stat`` this module reads."""

    zombie: bool
    group: int
    start_time: int  # clock ticks since boot


def parse_stat(line: str) -> _Stat:
    """The fields this module reads from one ``/proc/<pid>/stat`` line."""
    # The command name (field 2) may contain spaces and parentheses; the fields after
    # its last ")" are positional: state is field 3, pgrp field 5, starttime field 22.
    fields = line[line.rindex(")") + 2 :].split()
    return _Stat(zombie=fields[0] == "Z", group=int(fields[2]), start_time=int(fields[19]))


def _stat(pid: int) -> _Stat | None:
    try:
        line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone, or never existed
        return None
    return parse_stat(line)


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` in clock ticks since boot; None if it has exited.

    A zombie counts as exited: it only waits to be reaped.
    """
    stat = _stat(pid)
    if stat is None or stat.zombie:
        return None
    return stat.start_time


@dataclass(frozen=True)
class ProcessRecord:
    """What identifies a started process across CLI invocations: its pid and start time."""

    pid: int
    start_time: int

    @classmethod
    def of(cls, pid: int) -> ProcessRecord:
        """The record of ``pid`` now; one that has already exited gets a start time that
        matches no process, so it never counts as alive."""
        return cls(pid=pid, start_time=process_start_time(pid) or 0)

    def is_alive(self) -> bool:
        return process_start_time(self.pid) == self.start_time

    def to_json(self) -> dict[str, int]:
        return {"pid": self.pid, "start_time": self.start_time}

    @classmethod
    def from_json(cls, data: dict[str, int]) -> ProcessRecord:
        return cls(pid=int(data["pid"]), start_time=int(data["start_time"]))


# ---------------------------------------------------------------------------- starting


def popen_detached(
    argv: Sequence[str], log: BinaryIO, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session, stdin from /dev/null, stdout and stderr to ``log``."""
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=None if env is None else dict(env),
        close_fds=True,
    )


def spawn(
    argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
) -> ProcessRecord:
    """Start a service that outlives this process (the CLI exits after ``stack up``).

    Output is appended to ``log_path``; a command that exits at once is an error that
    points at that log.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        child = popen_detached(argv, log, env)
    start_time = process_start_time(child.pid)
    if start_time is None:
        returncode = child.wait()
        raise ServiceUnavailableError(
            f"{argv[0]} exited at once with code {returncode}; see {log_path} for why."
        )
    # Nobody here will wait for the child; tell Popen so it does not warn when collected.
    child.returncode = 0
    return ProcessRecord(pid=child.pid, start_time=start_time)


# ---------------------------------------------------------------------------- stopping


def group_members(leader: ProcessRecord) -> list[int]:
    """Live (non-zombie) processes of ``leader``'s group, or [] once the group id is not ours.

    The kernel does not hand out a pid while any process still uses it as a group id,
    so the number can be reused only after every member of our group is gone. Two
    checks keep a reused number from pointing at strangers: a process holding the
    leader's pid with another start time means the number was reused, and a member
    older than the leader cannot have been forked by it.
    """
    members: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        stat = _stat(pid)
        if stat is None or stat.group != leader.pid:
            continue
        if pid == leader.pid and stat.start_time != leader.start_time:
            return []
        if not stat.zombie and stat.start_time >= leader.start_time:
            members.append(pid)
    return members


def _signal_group(leader: ProcessRecord, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader.pid, sig)


def _reap_leaders(leaders: Iterable[ProcessRecord]) -> Callable[[], None]:
    """Collect the exit status of any leader that is our own child (so it is not a zombie).

    Right for children nobody else waits for (a test's in-process stack); a caller that
    holds ``Popen`` objects passes its own ``reap`` so their exit codes are not lost.
    """
    pids = [leader.pid for leader in leaders]

    def reap() -> None:
        for pid in pids:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)

    return reap


def _wait_empty(
    pending: list[ProcessRecord], deadline: float, reap: Callable[[], None], poll_s: float
) -> list[ProcessRecord]:
    while pending and time.monotonic() < deadline:
        reap()
        pending = [leader for leader in pending if group_members(leader)]
        if pending:
            time.sleep(poll_s)
    return pending


def terminate_groups(
    leaders: Iterable[ProcessRecord],
    grace_s: float,
    reap: Callable[[], None] | None = None,
    poll_s: float = 0.05,
) -> list[ProcessRecord]:
    """SIGTERM every group, SIGKILL what is left after ``grace_s``; return the groups killed.

    All groups get SIGTERM first and share one grace period, so stopping N tasks takes
    one grace period, not N. ``reap`` collects exit statuses of our own children (a
    zombie leader would otherwise keep its pid); by default any leader that is our child
    is reaped directly.
    """
    leaders = list(leaders)
    reap = reap or _reap_leaders(leaders)
    pending = [leader for leader in leaders if group_members(leader)]
    for leader in pending:
        _signal_group(leader, signal.SIGTERM)
    killed = _wait_empty(pending, time.monotonic() + grace_s, reap, poll_s)
    for leader in killed:
        _signal_group(leader, signal.SIGKILL)
    _wait_empty(killed, time.monotonic() + _KILL_WAIT_S, reap, poll_s)
    reap()
    return killed


def stop(record: ProcessRecord, grace_s: float = 15.0) -> None:
    """End the process group started as ``record``: SIGTERM, then SIGKILL after the grace."""
    terminate_groups([record], grace_s)


# ---------------------------------------------------------------------------- logs and ports


def wait_ready(
    record: ProcessRecord,
    answers: Callable[[], bool],
    timeout: float,
    died: Callable[[], str],
    silent: Callable[[], str],
) -> None:
    """Poll ``answers()`` until it holds; ``ServiceUnavailableError(died())`` when the process
    exits first, ``ServiceUnavailableError(silent())`` after ``timeout`` seconds.

    A service's port has no event to wait on, so this polls: ``answers`` should itself wait
    a little (a request with a timeout); the 50 ms pause only spares a refused port a spin.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not record.is_alive():
            raise ServiceUnavailableError(died())
        if answers():
            return
        time.sleep(0.05)
    raise ServiceUnavailableError(silent())


def tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log file, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log written)"
    return "\n".join(text.splitlines()[-lines:])


_LISTEN_PORTS_FROM = 10_000
"""The lowest port ``free_port`` picks: above the well-known and most registered services."""


def _ephemeral_ports() -> tuple[int, int]:
    """The kernel's range for the source ports of outgoing connections (Linux's default
    when it cannot be read)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32_768, 60_999


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now, below the kernel's ephemeral range.

    A service binds its port seconds after it is chosen (a JVM's start), and again after
    each restart; a port from the ephemeral range could meanwhile become the source port of
    any process's outgoing connection, and the service would fail to start ("Address
    already in use"; the likely cause of a fault drill's broker that did not start once in
    20 runs beside busy Kafka clients). Below the range only another listener can take it.
    Falls back to the kernel's choice when the range leaves no room below it.
    """
    low, _ = _ephemeral_ports()
    if low - _LISTEN_PORTS_FROM >= 1_000:
        chooser = random.Random()
        for _ in range(100):
            port = chooser.randrange(_LISTEN_PORTS_FROM, low)
            if port_is_free(port, host):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
        return True


def require_free_port(
    port: int, service: str, host: str = "127.0.0.1", fix: str | None = None
) -> None:
    """``port`` can be bound, or one sentence: who needs it, and ``fix`` (what to do)."""
    if not port_is_free(port, host):
        fix = fix or f"stop that process (`ss -ltnp 'sport = :{port}'` names it)"
        raise ServiceUnavailableError(
            f"Port {host}:{port} needed by {service} is already taken by another process; {fix}."
        )
