"""Processes the stack starts: free ports, detached launch, liveness by pid, and stopping.

The stack must stop only what it started. A pid alone is not proof (pids are reused), so
every started process is recorded with its start time as the kernel reports it, and a pid
counts as ours only while that start time still matches.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from coach_stream.errors import ServiceUnavailableError


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel's choice)."""
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


def require_free_port(port: int, service: str, host: str = "127.0.0.1") -> None:
    if not port_is_free(port, host):
        raise ServiceUnavailableError(
            f"Port {host}:{port} needed by {service} is already taken by another process; "
            f"stop that process or run `coach-stream stack down && coach-stream stack up` "
            f"to pick new ports."
        )


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` in clock ticks since boot, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; the fields after it are positional.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":  # a zombie has exited; it is only waiting to be reaped
        return None
    return int(fields[19])


@dataclass(frozen=True)
class ProcessRecord:
    """What identifies a started process across CLI invocations."""

    pid: int
    start_time: int

    def is_alive(self) -> bool:
        return process_start_time(self.pid) == self.start_time

    def to_json(self) -> dict[str, int]:
        return {"pid": self.pid, "start_time": self.start_time}

    @classmethod
    def from_json(cls, data: dict[str, int]) -> ProcessRecord:
        return cls(pid=int(data["pid"]), start_time=int(data["start_time"]))


def spawn(argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None) -> ProcessRecord:
    """Start ``argv`` detached from this terminal (own session), output appended to a log."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        child = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            close_fds=True,
        )
    start_time = process_start_time(child.pid)
    if start_time is None:
        returncode = child.wait()
        raise ServiceUnavailableError(
            f"{argv[0]} exited at once with code {returncode}; see {log_path} for why."
        )
    # The child outlives this process (the CLI exits after `up`); Popen must not warn.
    child.returncode = 0
    return ProcessRecord(pid=child.pid, start_time=start_time)


def stop(record: ProcessRecord, grace_seconds: float = 15.0) -> None:
    """SIGTERM the process group we started, then SIGKILL whatever is left after the grace."""
    if not record.is_alive():
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        _reap(record.pid)
        if not record.is_alive():
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(record.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while record.is_alive() and time.monotonic() < deadline:
        _reap(record.pid)
        time.sleep(0.05)


def _reap(pid: int) -> None:
    """Collect the exit status if ``pid`` is our own child (a test's in-process stack)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log file, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log written)"
    return "\n".join(text.splitlines()[-lines:])
