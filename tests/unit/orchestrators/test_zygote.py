"""Warm starts: ``python -m <preloaded module>`` tasks forked from the supervisor."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from coach_stream.orchestrators import LocalOrchestrator, RunState, SupervisorConfig
from coach_stream.orchestrators.plan import RunSpec, TaskSpec, TaskState
from coach_stream.orchestrators.zygote import forkable_module
from coach_stream.processes import group_members
from coach_stream.testing.waiting import wait_until

# `colorsys` is imported by nothing at interpreter start: finding it in sys.modules proves
# the task is a fork of the supervisor that preloaded it, not a fresh interpreter.
WARM = SupervisorConfig(
    preload=("timeit", "colorsys"),
    initial_backoff_s=0.1,
    poll_interval_s=0.02,
    stop_grace_s=2.0,
    linger_s=0.3,
)


def timeit_task(name: str, statement: str, **env: str) -> TaskSpec:
    argv = (sys.executable, "-m", "timeit", "-n", "1", "-r", "1", statement)
    return TaskSpec(name, "rollout", argv, env=env)


@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[LocalOrchestrator]:
    orchestrator = LocalOrchestrator(tmp_path / "state", config=WARM)
    yield orchestrator
    for run_id in orchestrator.runs():
        orchestrator.stop(run_id)


def test_only_this_python_running_a_preloaded_module_is_forked() -> None:
    assert forkable_module((sys.executable, "-m", "timeit", "x"), ["timeit"]) == "timeit"
    assert forkable_module((sys.executable, "-m", "json.tool"), ["timeit"]) is None
    assert forkable_module(("/other/python", "-m", "timeit"), ["timeit"]) is None
    assert forkable_module((sys.executable, "-c", "timeit"), ["timeit"]) is None


def test_a_forked_task_runs_warm_with_its_argv_env_and_log(
    orchestrator: LocalOrchestrator,
) -> None:
    statement = (
        "import os, sys; assert 'colorsys' in sys.modules; "
        "print('argv', sys.argv[1:3], 'X', os.environ['X'], 'sid', os.getsid(0) == os.getpid())"
    )
    orchestrator.submit(RunSpec("z1", (timeit_task("warm", statement, X="42"),)))

    assert orchestrator.wait("z1", timeout=20) is RunState.COMPLETE
    [status] = orchestrator.status("z1")
    assert (status.state, status.exit_code) == (TaskState.COMPLETE, 0)
    log = "\n".join(orchestrator.logs("z1", "warm"))
    assert "argv ['-n', '1'] X 42 sid True" in log
    assert "1 loop, best of 1" in log  # timeit's own output: the module ran as __main__


def test_forked_tasks_exit_codes_restarts_and_stop(orchestrator: LocalOrchestrator) -> None:
    crash = timeit_task("crash", "import os; os._exit(3)")
    sleeper = timeit_task("sleeper", "import time; time.sleep(120)")
    spec = RunSpec("z2", (TaskSpec(crash.name, crash.group, crash.argv, restart=False), sleeper))
    orchestrator.submit(spec)

    statuses = {s.name: s for s in orchestrator.status("z2")}
    sleeper_pid = statuses["sleeper"].pid
    assert sleeper_pid is not None and os.getpgid(sleeper_pid) == sleeper_pid
    record = orchestrator.run_dir("z2").read()
    assert record.supervisor is not None
    with open(f"/proc/{sleeper_pid}/stat") as stat:  # a child of the supervisor itself
        assert int(stat.read().rsplit(")", 1)[1].split()[1]) == record.supervisor.pid

    wait_until(lambda: orchestrator.status("z2")[0].state is TaskState.FAILED, what="crash")
    orchestrator.stop("z2")

    statuses = {s.name: s for s in orchestrator.status("z2")}
    assert (statuses["crash"].state, statuses["crash"].exit_code) == (TaskState.FAILED, 3)
    assert statuses["sleeper"].state is TaskState.STOPPED
    assert all(not group_members(t.process) for t in record.tasks if t.process)
