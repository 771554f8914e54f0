"""Exit code 2 ends a run at once with the task's own error line; other crashes restart."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from coach_stream.core import RunSpec, TaskSpec, TaskState
from coach_stream.errors import OrchestratorError
from coach_stream.orchestrators import LocalOrchestrator, RunState, SupervisorConfig
from coach_stream.orchestrators.launcher import follow
from coach_stream.orchestrators.supervisor import last_error_line

FAST = SupervisorConfig(
    initial_backoff_s=0.05, max_backoff_s=0.1, poll_interval_s=0.02, stop_grace_s=2.0, linger_s=0.3
)
SLEEP = "import time; time.sleep(120)"
REFUSES = (
    "import sys; print('some startup log', flush=True); "
    "print('error: Cannot create environment NoSuchEnv-v0; fix env_id.', file=sys.stderr); "
    "sys.exit(2)"
)


def run_of(run_id: str, trainer: str, worker: str = SLEEP) -> RunSpec:
    def task(name: str, group: str, code: str) -> TaskSpec:
        return TaskSpec(name, group, (sys.executable, "-c", code))

    tasks = (task("trainer", "trainer", trainer), task("rollout-0", "rollout", worker))
    return RunSpec(run_id, tasks)


@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[LocalOrchestrator]:
    orchestrator = LocalOrchestrator(tmp_path / "state", config=FAST)
    yield orchestrator
    for run_id in orchestrator.runs():
        orchestrator.stop(run_id)


def test_a_trainer_exiting_2_fails_the_run_at_once_with_its_error(
    orchestrator: LocalOrchestrator,
) -> None:
    orchestrator.submit(run_of("d1", REFUSES))
    started = time.monotonic()
    outcome = follow(orchestrator, "d1", poll_s=0.05)

    assert outcome.state is RunState.FAILED
    assert outcome.failure == (
        "trainer exited with code 2: error: Cannot create environment NoSuchEnv-v0; fix env_id."
    )
    assert time.monotonic() - started < 10  # not ten restarts with backoff
    trainer = orchestrator.record("d1").task("trainer")
    assert (trainer.state, trainer.restarts, trainer.exit_code) == (TaskState.FAILED, 0, 2)
    assert orchestrator.record("d1").task("rollout-0").state is TaskState.STOPPED


def test_a_worker_exiting_2_fails_the_run_too(orchestrator: LocalOrchestrator) -> None:
    orchestrator.submit(run_of("d2", SLEEP, worker=REFUSES))
    outcome = follow(orchestrator, "d2", poll_s=0.05)
    assert outcome.state is RunState.FAILED
    assert (outcome.failure or "").startswith("rollout-0 exited with code 2: error: Cannot")
    assert orchestrator.record("d2").task("trainer").state is TaskState.STOPPED


def test_other_exit_codes_restart_with_backoff(
    orchestrator: LocalOrchestrator, tmp_path: Path
) -> None:
    """Exit 3 (a service was unreachable) and 1 (a crash) are worth another try."""
    marker = tmp_path / "attempts"
    flaky = (
        "import sys, pathlib; p = pathlib.Path(sys.argv[1]); n = len(p.read_text()) "
        "if p.exists() else 0; p.write_text('x' * (n + 1)); sys.exit([3, 1][n] if n < 2 else 0)"
    )
    spec = RunSpec(
        "d3",
        (
            TaskSpec("trainer", "trainer", (sys.executable, "-c", flaky, str(marker))),
            TaskSpec("rollout-0", "rollout", (sys.executable, "-c", SLEEP)),
        ),
    )
    orchestrator.submit(spec)
    outcome = follow(orchestrator, "d3", poll_s=0.05)
    trainer = orchestrator.record("d3").task("trainer")
    assert (trainer.state, trainer.restarts) == (TaskState.COMPLETE, 2)
    assert marker.read_text() == "xxx"
    assert outcome.state is RunState.COMPLETE and outcome.failure is None


def test_status_shows_the_failure(
    orchestrator: LocalOrchestrator, capsys: pytest.CaptureFixture[str]
) -> None:
    from coach_stream.cli.main import main

    orchestrator.submit(run_of("d4", REFUSES))
    follow(orchestrator, "d4", poll_s=0.05)
    assert main(["status", "d4", "--state-dir", str(orchestrator.state_dir)]) == 0
    assert "failure: trainer exited with code 2: error: Cannot create" in capsys.readouterr().out


def test_launch_exit_code_of_a_failed_run(orchestrator: LocalOrchestrator) -> None:
    from coach_stream.cli.launch import _exit_code

    orchestrator.submit(run_of("d5", REFUSES))
    outcome = follow(orchestrator, "d5", poll_s=0.05)
    with pytest.raises(OrchestratorError, match="run d5 failed: trainer exited with code 2"):
        _exit_code(outcome, Console(stderr=True))


def test_last_error_line_skips_supervisor_notes(tmp_path: Path) -> None:
    log = tmp_path / "trainer.log"
    log.write_text("# coach-stream x: start\nstarting\nerror: the cause\n\n# coach-stream x: end\n")
    assert last_error_line(log) == "error: the cause"
    log.write_text("# coach-stream x: start\n")
    assert last_error_line(log) == "(it printed nothing)"
    assert last_error_line(tmp_path / "missing.log") == "(no log)"
