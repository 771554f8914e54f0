"""The zygote that outlives launches: supervisors forked warm from it, and its limits."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from coach_stream.orchestrators import LocalOrchestrator, RunState, SupervisorConfig
from coach_stream.orchestrators.plan import RunSpec, TaskSpec, TaskState
from coach_stream.orchestrators.zygote_client import SUPERVISOR, ZygoteClient, ask, fingerprint
from coach_stream.processes import ProcessRecord
from coach_stream.testing.waiting import wait_until

# `colorsys` is imported by nothing at interpreter start: finding it in a task proves that
# the task descends from the zygote that preloaded it.
PRELOAD = ("timeit", "colorsys")
CONFIG = SupervisorConfig(preload=PRELOAD, poll_interval_s=0.02, stop_grace_s=2.0, linger_s=0.3)


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return handle.read().replace(b"\0", b" ").decode().strip()


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A short private directory: a Unix socket's path may not exceed 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="zy-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def zygote(socket_dir: Path) -> Iterator[ZygoteClient]:
    client = ZygoteClient(PRELOAD, directory=socket_dir, idle_s=60.0)
    yield client
    for path in socket_dir.glob("zygote-*.sock"):  # end the zygotes this test started
        pid = client.ping(path)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            wait_until(lambda p=pid: _gone(p), what="zygote exit")


@pytest.fixture
def orchestrator(tmp_path: Path, zygote: ZygoteClient) -> Iterator[LocalOrchestrator]:
    orchestrator = LocalOrchestrator(tmp_path / "state", config=CONFIG, zygote=zygote)
    yield orchestrator
    for run_id in orchestrator.runs():
        orchestrator.stop(run_id)


def timeit_task(name: str, statement: str, **env: str) -> TaskSpec:
    argv = (sys.executable, "-m", "timeit", "-n", "1", "-r", "1", statement)
    return TaskSpec(name, "rollout", argv, env=env)


def test_supervisors_are_forked_from_one_zygote_and_run_warm_tasks(
    orchestrator: LocalOrchestrator, zygote: ZygoteClient, tmp_path: Path
) -> None:
    statement = (
        "import os, sys; assert 'colorsys' in sys.modules; "
        "print('X', os.environ['X'], os.environ['ZYGOTE_TEST_MARK'], 'cwd', os.getcwd(), "
        "'sid', os.getsid(0) == os.getpid())"
    )
    os.environ["ZYGOTE_TEST_MARK"] = "from-the-launcher"  # the launcher's env reaches tasks
    try:
        orchestrator.submit(RunSpec("w1", (timeit_task("warm", statement, X="7"),)))
        orchestrator.submit(RunSpec("w2", (timeit_task("sleeper", "import time; time.sleep(60)"),)))
    finally:
        del os.environ["ZYGOTE_TEST_MARK"]
    first, second = (orchestrator.run_dir(r).read().supervisor for r in ("w1", "w2"))
    assert first is not None and second is not None
    zygote_pid = zygote.ping(zygote.socket_path(os.environ))
    assert zygote_pid is not None and zygote_pid != os.getpid()
    assert parent_of(second.pid) == zygote_pid  # not a child of this (launching) process
    assert first.pid != second.pid

    sleeper = orchestrator.status("w2")[0].pid
    assert sleeper is not None
    assert parent_of(sleeper) == second.pid  # tasks are forked by their own supervisor
    assert "--run-id w2" in cmdline(second.pid)  # ps shows what each process stands for
    assert cmdline(sleeper).endswith("-m timeit -n 1 -r 1 import time; time.sleep(60)")

    assert orchestrator.wait("w1", timeout=20) is RunState.COMPLETE
    [status] = orchestrator.status("w1")
    assert (status.state, status.exit_code) == (TaskState.COMPLETE, 0)
    log = "\n".join(orchestrator.logs("w1", "warm"))
    assert f"X 7 from-the-launcher cwd {os.getcwd()} sid True" in log

    orchestrator.stop("w2")
    assert orchestrator.record("w2").state is RunState.STOPPED
    assert not second.is_alive() and not ProcessRecord.of(sleeper).is_alive()


def test_only_preloaded_modules_are_forked(zygote: ZygoteClient, tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    assert zygote.fork("json.tool", [], os.environ, tmp_path, log) is None  # asked of nobody
    assert zygote.ensure(os.environ)
    answer = ask(
        zygote.socket_path(os.environ),
        {"module": "json.tool", "args": [], "env": {}, "cwd": "/", "log": str(log)},
    )
    assert answer is not None and "not preloaded" in answer["error"]
    assert not log.exists()


def test_a_module_that_does_not_import_is_left_out_and_the_zygote_serves(
    socket_dir: Path, tmp_path: Path
) -> None:
    # as numba would on a platform without its wheels: the forks import what they need
    client = ZygoteClient(("colorsys", "no_such_module_here"), directory=socket_dir, idle_s=60.0)
    try:
        assert client.ensure(os.environ)
        path, log = client.socket_path(os.environ), tmp_path / "x.log"
        request = {"module": "no_such_module_here", "args": [], "env": {}, "cwd": "/"}
        answer = ask(path, {**request, "log": str(log)})
        assert answer is not None and "not preloaded" in answer["error"]
        child = client.fork("colorsys", [], os.environ, tmp_path, log)
        assert child is not None
        wait_until(lambda: _gone(child.pid), what="the forked module's exit")
    finally:
        pid = client.ping(client.socket_path(os.environ))
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            wait_until(lambda: _gone(pid), what="zygote exit")


def test_another_code_or_import_path_gets_another_zygote(socket_dir: Path) -> None:
    client = ZygoteClient(PRELOAD, directory=socket_dir)
    here = client.socket_path({})
    assert client.socket_path({}) == here
    assert client.socket_path({"PYTHONPATH": "/elsewhere"}) != here
    assert ZygoteClient(("timeit",), directory=socket_dir).socket_path({}) != here
    assert fingerprint("/other/python", (SUPERVISOR,), {}) != fingerprint(
        sys.executable, (SUPERVISOR,), {}
    )


def test_an_idle_zygote_exits_and_removes_its_socket(socket_dir: Path) -> None:
    client = ZygoteClient(PRELOAD, directory=socket_dir, idle_s=0.5)
    assert client.ensure(os.environ)
    path = client.socket_path(os.environ)
    # Found by its argv, not by a second ping: a test stalled past idle_s between ensure()
    # and a ping would find it already gone (that happened under load).
    serving = [pid for pid in _pids() if f"--socket {path}" in _cmdline_or_empty(pid)]
    wait_until(lambda: not path.exists(), what="the idle zygote's socket removed")
    for pid in serving:
        wait_until(lambda p=pid: _gone(p), what="its exit")
    assert not [pid for pid in _pids() if f"--socket {path}" in _cmdline_or_empty(pid)]
    left = {log.name: log.read_text(errors="replace") for log in socket_dir.glob("*.log")}
    assert not left, f"a clean exit leaves no log behind; left: {left}"


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _cmdline_or_empty(pid: int) -> str:
    try:
        return cmdline(pid)
    except OSError:  # gone meanwhile
        return ""


def test_stop_ends_the_zygotes_of_its_directory_and_the_runs_go_on(
    orchestrator: LocalOrchestrator, zygote: ZygoteClient, socket_dir: Path
) -> None:
    """``python -m …zygote_server --stop``, as scripts/with-stack.sh runs it at its end."""
    orchestrator.submit(RunSpec("s1", (timeit_task("sleep", "import time; time.sleep(60)"),)))
    path = zygote.socket_path(os.environ)
    pid = zygote.ping(path)
    assert pid is not None
    supervisor = orchestrator.run_dir("s1").read().supervisor
    assert supervisor is not None and parent_of(supervisor.pid) == pid
    env = {**os.environ, "COACH_STREAM_ZYGOTE_DIR": str(socket_dir)}
    done = subprocess.run(
        [sys.executable, "-m", "coach_stream.orchestrators.zygote_server", "--stop"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"zygotes stopped in {socket_dir}: {pid}"
    assert _gone(pid)  # waited for: gone when --stop returns
    assert not path.exists()
    assert supervisor.is_alive()  # the run it forked goes on
    assert orchestrator.record("s1").state is RunState.RUNNING


def _gone(pid: int) -> bool:
    """``pid`` has exited (collected here when it is this test's child, not left a zombie)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    return not ProcessRecord.of(pid).is_alive()


def test_a_zygote_that_cannot_start_leaves_the_supervisor_spawned(
    tmp_path: Path, socket_dir: Path
) -> None:
    broken = ZygoteClient(("timeit", "no_such_module_anywhere"), directory=socket_dir)
    orchestrator = LocalOrchestrator(tmp_path / "state", config=CONFIG, zygote=broken)
    orchestrator.submit(RunSpec("c1", (timeit_task("cold", "pass"),)))
    assert orchestrator.wait("c1", timeout=20) is RunState.COMPLETE
    supervisor = orchestrator.run_dir("c1").read().supervisor
    assert supervisor is not None
    [log] = socket_dir.glob("zygote-*.log")  # why it could not start, for whoever asks
    assert "no_such_module_anywhere" in log.read_text()


def test_a_socket_directory_that_is_not_private_means_a_cold_start_not_a_traceback(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)  # others may read it: not a place for this user's zygote socket
    env = {**os.environ, "COACH_STREAM_ZYGOTE_DIR": str(shared)}
    client = ZygoteClient(PRELOAD)
    assert client.fork(SUPERVISOR, [], env, tmp_path, tmp_path / "log") is None
    stop = subprocess.run(
        [sys.executable, "-m", "coach_stream.orchestrators.zygote_server", "--stop"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert stop.returncode == 1 and "Traceback" not in stop.stderr
    assert stop.stdout.count("\n") == 1 and "is not a private directory" in stop.stdout
