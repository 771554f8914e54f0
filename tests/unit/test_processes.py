"""``coach_stream.processes`` without starting processes: records, /proc parsing, ports, logs.

What needs real children (detached start, group termination) is in
``tests/integration/test_child_processes.py``.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from coach_stream import processes
from coach_stream.errors import ServiceUnavailableError
from coach_stream.processes import ProcessRecord


def _stat_line(command: str, state: str, group: int, start_time: int) -> str:
    # pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
    # utime stime cutime cstime priority nice num_threads itrealvalue starttime ...
    rest = [state, "1", str(group), "7", "0", "-1", "0", *["0"] * 12, str(start_time), "99"]
    return f"4242 ({command}) " + " ".join(rest) + "\n"


def test_stat_fields_are_read_after_the_last_parenthesis() -> None:
    # A command name may contain spaces and ")" (e.g. a renamed thread "a) S 1 2").
    stat = processes.parse_stat(_stat_line("a) S 1 2", "S", group=31, start_time=777))
    assert (stat.zombie, stat.group, stat.start_time) == (False, 31, 777)
    assert processes.parse_stat(_stat_line("python", "Z", group=5, start_time=9)).zombie


def test_this_process_is_alive_under_its_own_start_time_only() -> None:
    me = ProcessRecord.of(os.getpid())
    assert me.start_time > 0
    assert me.is_alive()
    # The same pid with another start time is a reused pid: not ours.
    assert not ProcessRecord(pid=me.pid, start_time=me.start_time - 1).is_alive()


def test_a_pid_that_does_not_exist_is_never_alive() -> None:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    assert processes.process_start_time(pid_max + 1) is None
    gone = ProcessRecord.of(pid_max + 1)
    assert gone.start_time == 0
    assert not gone.is_alive()


def test_a_record_survives_json() -> None:
    record = ProcessRecord(pid=123, start_time=456)
    assert record.to_json() == {"pid": 123, "start_time": 456}
    assert ProcessRecord.from_json(record.to_json()) == record


def test_a_taken_port_is_one_clear_error() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not processes.port_is_free(port)
        with pytest.raises(ServiceUnavailableError, match=f"127.0.0.1:{port}.*already taken"):
            processes.require_free_port(port, "the Kafka broker")
    # Closed again: the same port can be bound and is reported free.
    assert processes.port_is_free(port)
    processes.require_free_port(port, "the Kafka broker")


def test_a_free_port_can_be_bound_and_no_outgoing_connection_can_take_it() -> None:
    port = processes.free_port()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))  # raises if the port was not free
    low, _high = (
        int(p) for p in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    )
    assert 10_000 <= port < low  # below the kernel's source ports for connections


def test_tail_gives_the_last_lines_or_says_there_is_no_log(tmp_path: Path) -> None:
    log = tmp_path / "service.log"
    log.write_text("".join(f"line {i}\n" for i in range(30)))
    assert processes.tail(log, lines=3) == "line 27\nline 28\nline 29"
    assert processes.tail(log).splitlines()[0] == "line 10"  # 20 by default
    assert processes.tail(tmp_path / "missing.log") == "(no log written)"
