"""The local supervisor with tiny ``python -c`` children: restarts, run end, stop, status."""

from __future__ import annotations

import itertools
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from coach_stream.errors import OrchestratorError
from coach_stream.orchestrators import LocalOrchestrator, RunState, SupervisorConfig
from coach_stream.orchestrators.plan import RunSpec, TaskSpec, TaskState
from coach_stream.processes import group_members
from coach_stream.testing.waiting import wait_until

FAST = SupervisorConfig(
    initial_backoff_s=0.1,
    max_backoff_s=1.0,
    max_restarts=3,
    healthy_after_s=30.0,
    poll_interval_s=0.02,
    stop_grace_s=2.0,
    linger_s=0.5,
)
SLEEP = "import time; time.sleep(120)"


def task(name: str, code: str, group: str = "rollout", restart: bool = True) -> TaskSpec:
    return TaskSpec(name=name, group=group, argv=(sys.executable, "-c", code), restart=restart)


def nothing_left(orchestrator: LocalOrchestrator, run_id: str) -> bool:
    record = orchestrator.run_dir(run_id).read()
    leaders = [t.process for t in record.tasks if t.process is not None]
    if record.supervisor is not None:
        leaders.append(record.supervisor)
    return all(not group_members(leader) for leader in leaders)


@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[LocalOrchestrator]:
    orchestrator = LocalOrchestrator(tmp_path / "state", config=FAST)
    yield orchestrator
    for run_id in orchestrator.runs():
        orchestrator.stop(run_id)


def test_stop_ends_every_task_and_what_it_forked(orchestrator: LocalOrchestrator) -> None:
    forks = (
        "import subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {SLEEP!r}]); time.sleep(120)"
    )
    orchestrator.submit(RunSpec("r1", (task("a", SLEEP), task("b", forks))))
    record = orchestrator.run_dir("r1").read()
    b = record.task("b").process
    assert b is not None
    wait_until(lambda: len(group_members(b)) == 2)  # b and its grandchild

    orchestrator.stop("r1")

    assert nothing_left(orchestrator, "r1")
    assert orchestrator.record("r1").state is RunState.STOPPED
    assert {s.state for s in orchestrator.status("r1")} == {TaskState.STOPPED}


def test_a_crashing_task_is_restarted_with_growing_backoff_then_fails(
    orchestrator: LocalOrchestrator,
) -> None:
    stamps = "import time; print('started', time.monotonic(), flush=True); raise SystemExit(3)"
    orchestrator.submit(RunSpec("r2", (task("crasher", stamps), task("idle", SLEEP))))

    wait_until(lambda: orchestrator.status("r2")[0].state is TaskState.FAILED)

    crasher = orchestrator.status("r2")[0]
    assert (crasher.restarts, crasher.exit_code) == (FAST.max_restarts, 3)
    lines = orchestrator.logs("r2", "crasher")
    starts = [float(line.split()[1]) for line in lines if line.startswith("started")]
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert len(starts) == FAST.max_restarts + 1
    # The schedule grows, and each restart waited at least its step of it. (Not gaps[-1] >
    # gaps[0]: each gap also holds an interpreter start, which load can stretch by more
    # than the 0.3 s between the first and last backoff.)
    schedule = [FAST.backoff(failures) for failures in (1, 2, 3)]
    assert schedule == [0.1, 0.2, 0.4]
    for gap, backoff in zip(gaps, schedule, strict=True):
        assert gap >= backoff
    # A worker that crash-loops does not end the run: only the primary (trainer) does.
    assert orchestrator.status("r2")[1].state is TaskState.RUNNING


def test_a_task_that_crashes_once_is_restarted_and_completes(
    orchestrator: LocalOrchestrator, tmp_path: Path
) -> None:
    marker = tmp_path / "crashed-once"
    code = (
        "import pathlib, sys; p = pathlib.Path(sys.argv[1]); "
        "sys.exit(0) if p.exists() else (p.touch(), sys.exit(1))"
    )
    spec = TaskSpec("flaky", "rollout", (sys.executable, "-c", code, str(marker)))
    orchestrator.submit(RunSpec("r3", (spec,)))

    assert orchestrator.wait("r3", timeout=20) is RunState.COMPLETE
    [status] = orchestrator.status("r3")
    assert (status.state, status.restarts, status.exit_code) == (TaskState.COMPLETE, 1, 0)


def test_the_run_ends_with_its_trainer_and_the_rest_are_stopped(
    orchestrator: LocalOrchestrator,
) -> None:
    orchestrator.submit(
        RunSpec("r4", (task("trainer", "print('done')", group="trainer"), task("w", SLEEP)))
    )

    assert orchestrator.wait("r4", timeout=20) is RunState.COMPLETE
    states = {s.name: s.state for s in orchestrator.status("r4")}
    assert states == {"trainer": TaskState.COMPLETE, "w": TaskState.STOPPED}
    assert nothing_left(orchestrator, "r4")
    assert "done" in list(orchestrator.logs("r4", "trainer"))


def test_a_failed_trainer_fails_the_run(orchestrator: LocalOrchestrator) -> None:
    trainer = task("trainer", "raise SystemExit(5)", group="trainer", restart=False)
    orchestrator.submit(RunSpec("r5", (trainer, task("w", SLEEP))))

    assert orchestrator.wait("r5", timeout=20) is RunState.FAILED
    states = {s.name: (s.state, s.exit_code) for s in orchestrator.status("r5")}
    assert states["trainer"] == (TaskState.FAILED, 5)
    assert states["w"][0] is TaskState.STOPPED
    assert nothing_left(orchestrator, "r5")


def test_status_logs_and_stop_work_from_another_instance(
    orchestrator: LocalOrchestrator,
) -> None:
    hello = "print('hello from a', flush=True); import time; time.sleep(120)"
    orchestrator.submit(RunSpec("r6", (task("a", hello), task("b", SLEEP))))
    other = LocalOrchestrator(orchestrator.state_dir)

    statuses = other.status("r6")
    assert [(s.name, s.state) for s in statuses] == [
        ("a", TaskState.RUNNING),
        ("b", TaskState.RUNNING),
    ]
    assert all(s.pid is not None and os.path.exists(f"/proc/{s.pid}") for s in statuses)
    wait_until(lambda: any("[a] hello from a" in line for line in other.logs("r6")))
    assert other.runs() == ["r6"]

    other.stop("r6")

    assert orchestrator.record("r6").state is RunState.STOPPED
    assert nothing_left(orchestrator, "r6")


def test_stop_after_the_supervisor_was_killed_still_ends_the_tasks(
    orchestrator: LocalOrchestrator,
) -> None:
    orchestrator.submit(RunSpec("r7", (task("a", SLEEP),)))
    supervisor = orchestrator.run_dir("r7").read().supervisor
    assert supervisor is not None
    os.kill(supervisor.pid, signal.SIGKILL)
    wait_until(lambda: not supervisor.is_alive())

    assert orchestrator.record("r7").state is RunState.FAILED  # lost, not "running"
    orchestrator.stop("r7")

    assert nothing_left(orchestrator, "r7")
    assert orchestrator.status("r7")[0].state is TaskState.STOPPED


def test_a_run_id_is_used_once(orchestrator: LocalOrchestrator) -> None:
    orchestrator.submit(RunSpec("r8", (task("a", "pass"),)))
    with pytest.raises(OrchestratorError, match="already exists"):
        orchestrator.submit(RunSpec("r8", (task("a", "pass"),)))


def test_an_unknown_run_is_one_clear_error(orchestrator: LocalOrchestrator) -> None:
    with pytest.raises(OrchestratorError, match="No run 'nope'"):
        orchestrator.status("nope")


def test_a_killed_trainer_is_restarted_and_the_run_goes_on(
    orchestrator: LocalOrchestrator, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    code = (
        "import pathlib, sys, time\n"
        "while not pathlib.Path(sys.argv[1]).exists(): time.sleep(0.02)\n"
    )
    trainer = TaskSpec("trainer", "trainer", (sys.executable, "-c", code, str(release)))
    worker = task("w", "import time; time.sleep(120)")
    orchestrator.submit(RunSpec("r9", (trainer, worker)))
    first = orchestrator.status("r9")[0]
    assert first.pid is not None

    os.kill(first.pid, signal.SIGKILL)
    wait_until(lambda: orchestrator.status("r9")[0].restarts == 1)
    wait_until(lambda: orchestrator.status("r9")[0].state is TaskState.RUNNING)
    assert orchestrator.status("r9")[0].pid != first.pid
    assert orchestrator.record("r9").state is RunState.RUNNING
    release.touch()

    assert orchestrator.wait("r9", timeout=20) is RunState.COMPLETE
    assert [s.state for s in orchestrator.status("r9")] == [TaskState.COMPLETE, TaskState.STOPPED]
    assert any("exited with code -9" in line for line in orchestrator.logs("r9", "trainer"))


def test_tasks_that_exit_on_their_own_after_the_trainer_are_complete(tmp_path: Path) -> None:
    orchestrator = LocalOrchestrator(tmp_path / "state", config=replace(FAST, linger_s=10.0))
    trainer = task("trainer", "pass", group="trainer")
    orchestrator.submit(RunSpec("r10", (trainer, task("w", "import time; time.sleep(0.2)"))))
    assert orchestrator.wait("r10", timeout=20) is RunState.COMPLETE
    assert {s.state for s in orchestrator.status("r10")} == {TaskState.COMPLETE}


def test_a_stopped_run_resumes_with_its_recorded_tasks(orchestrator: LocalOrchestrator) -> None:
    orchestrator.submit(RunSpec("r9", (task("trainer", SLEEP, group="trainer"), task("w", SLEEP))))
    with pytest.raises(OrchestratorError, match="still running"):
        orchestrator.resume("r9")
    orchestrator.stop("r9")
    before = {s.name: s.pid for s in orchestrator.status("r9")}

    orchestrator.resume("r9")

    record = orchestrator.record("r9")
    assert record.state is RunState.RUNNING
    after = {s.name: s for s in orchestrator.status("r9")}
    assert set(after) == {"trainer", "w"}
    assert all(s.state is TaskState.RUNNING and s.pid != before[n] for n, s in after.items())
    assert all(s.restarts == 0 for s in after.values())


def test_a_completed_or_unknown_run_is_not_resumed(orchestrator: LocalOrchestrator) -> None:
    orchestrator.submit(RunSpec("r10", (task("trainer", "print('done')", group="trainer"),)))
    assert orchestrator.wait("r10", timeout=20) is RunState.COMPLETE
    with pytest.raises(OrchestratorError, match="completed"):
        orchestrator.resume("r10")
    with pytest.raises(OrchestratorError, match="No run 'nope'"):
        orchestrator.resume("nope")
