"""Shared by unit and integration tests: marks every test under tests/integration, and
leaves nothing of the project running after the session (see ``_nothing_left_running``)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

_INTEGRATION = Path(__file__).parent / "integration"
SESSION_MARK = "COACH_STREAM_TEST_SESSION"
"""Set for the whole session: every process it starts, however indirectly, inherits it."""
_PROJECT_COMMAND = re.compile(r"(^|\s)(-m coach_stream\.|\S*/coach-stream(\s|$))")
"""``python -m coach_stream.…`` (a zygote, a supervisor, a task) or the ``coach-stream`` CLI."""

# The Nomad API double's fixtures (nomad_double, nomad_double_factory, nomad_double_session).
pytest_plugins = ["nomad_double.fixtures"]


def pytest_configure(config: pytest.Config) -> None:
    # A suite started in the background of a non-interactive shell (`make test &`, some CI
    # runners) inherits SIGINT ignored, and so does every process it starts: bash cannot
    # trap a signal ignored on entry and Python installs no KeyboardInterrupt for it, so
    # the tests that send SIGINT (a user's Ctrl-C) would fail there, and only there.
    # Python's own handler here makes the children start with SIGINT's default again.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # MuJoCo picks its OpenGL when first imported; without an X display only EGL renders
    # (what `coach-stream play --video` sets for itself). Set before any test imports it.
    if not os.environ.get("DISPLAY"):
        os.environ.setdefault("MUJOCO_GL", "egl")
    _refuse_a_loadgroup_that_would_not_group(config)


def _refuse_a_loadgroup_that_would_not_group(config: pytest.Config) -> None:
    """`--dist loadgroup` keeps an xdist_group's tests on one worker only through the "@group"
    suffix xdist 3.8 writes into their node ids; pytest 9.2 keeps node ids elsewhere, so the
    group is silently spread (pytest-xdist#1386) and a module fixture's spawned processes run
    once per worker (the fast lane's data-parallel ranks: 2 x 13-18 s)."""
    if config.getoption("dist", default="no") != "loadgroup":
        return
    from importlib.metadata import version

    from packaging.version import Version

    pytest_version, xdist_version = Version(version("pytest")), Version(version("pytest-xdist"))
    if pytest_version >= Version("9.2") and xdist_version <= Version("3.8.0"):
        raise pytest.UsageError(
            f"pytest {pytest_version} with pytest-xdist {xdist_version} ignores "
            "xdist_group under --dist loadgroup; install the versions pyproject.toml pins "
            "(make setup)."
        )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _INTEGRATION in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


def project_processes(mark: str) -> dict[int, str]:
    """``{pid: command line}`` of each live coach_stream process (a zygote, a supervisor, a
    task, a ``coach-stream`` command) whose environment holds ``SESSION_MARK=mark``."""
    needle = f"{SESSION_MARK}={mark}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            # A warm fork's command line is one string (setproctitle), a spawned one's is not.
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if _PROJECT_COMMAND.search(args) and needle in environ and state != "Z":
            found[int(entry.name)] = args.strip()
    return found


def end_processes(pids: list[int], grace_s: float = 10.0) -> None:
    """SIGTERM each (its whole group when it leads one), SIGKILL what is left after
    ``grace_s``, and wait, with a deadline, until none is left."""
    from coach_stream.processes import ProcessRecord, process_start_time

    records = [ProcessRecord.of(pid) for pid in pids]

    def signal_all(sig: signal.Signals) -> None:
        for record in records:
            with contextlib.suppress(OSError):
                if os.getpgid(record.pid) == record.pid and record.is_alive():
                    os.killpg(record.pid, sig)
                elif record.is_alive():
                    os.kill(record.pid, sig)

    def alive() -> bool:
        for record in records:  # our own children would stay zombies: collect them
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(record.pid, os.WNOHANG)
        return any(process_start_time(r.pid) == r.start_time for r in records)

    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        signal_all(sig)
        deadline = time.monotonic() + wait_s
        while alive() and time.monotonic() < deadline:
            time.sleep(0.05)  # not our children: no exit to wait on
        if not alive():
            return


@pytest.fixture(scope="session", autouse=True)
def _nothing_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """The session's launches fork their supervisors from a zygote of its own (a private
    ``COACH_STREAM_ZYGOTE_DIR``), which is stopped when the session ends; so is every
    coach_stream process the session started and left running (a run's supervisor or
    tasks, a ``coach-stream`` command), each named in the terminal summary."""
    from coach_stream.orchestrators.zygote_client import ZYGOTE_DIR_ENV, stop_zygotes

    # Short, under /tmp: a Unix socket's path may not exceed 107 bytes.
    directory = Path(tempfile.mkdtemp(prefix="cs-session-", dir="/tmp"))
    saved = {name: os.environ.get(name) for name in (ZYGOTE_DIR_ENV, SESSION_MARK)}
    os.environ[ZYGOTE_DIR_ENV] = os.environ[SESSION_MARK] = str(directory)
    try:
        yield
    finally:
        stop_zygotes(directory)
        left = project_processes(str(directory))
        end_processes(list(left))
        shutil.rmtree(directory, ignore_errors=True)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        if left and reporter is not None:
            reporter.write_line(f"tests left {len(left)} coach_stream processes running; ended:")
            for pid, args in sorted(left.items()):
                reporter.write_line(f"  {pid} {args}")
