"""Exit code 2 ends a run at once with the task's own error line; other crashes restart."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from coach_stream.errors import OrchestratorError, ServiceUnavailableError
from coach_stream.orchestrators import LocalOrchestrator, RunState, SupervisorConfig
from coach_stream.orchestrators.launcher import follow
from coach_stream.orchestrators.plan import RunSpec, TaskSpec, TaskState
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


def test_status_of_a_local_run_reads_no_topic_a_stopped_broker_cannot_have(
    orchestrator: LocalOrchestrator,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The broker is asked once whether it has the run's topic (a refused connection answers
    at once); reading the topic would wait out the reader's timeout for the same answer."""
    from coach_stream.cli import status as status_cli
    from coach_stream.cli.main import main

    def read_topic(*args: object) -> None:
        raise AssertionError("read the telemetry topic of a broker that is not there")

    monkeypatch.setattr(status_cli, "fold_run_topic", read_topic)
    orchestrator.submit(run_of("d6", REFUSES))
    follow(orchestrator, "d6", poll_s=0.05)
    state = ["--state-dir", str(orchestrator.state_dir), "--kafka", "127.0.0.1:1"]
    for extra in ([], ["--json"]):
        assert main(["status", "d6", *state, *extra]) == 0
        assert "trainer exited with code 2" in capsys.readouterr().out


def test_launch_exit_code_of_a_failed_run(orchestrator: LocalOrchestrator) -> None:
    from coach_stream.cli.live import exit_code as _exit_code

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


class _Blinking:
    """An orchestrator whose telemetry cannot be read for the first ``outages`` polls, as
    while the broker restarts; everything else is the local orchestrator's."""

    def __init__(self, inner: LocalOrchestrator, outages: int, over: Path | None = None) -> None:
        self.inner, self.outages, self.polls, self.over = inner, outages, 0, over

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def task_lines(self, run_id: str) -> object:
        lines, blinking = self.inner.task_lines(run_id), self

        class Follower:
            def poll(self) -> list[tuple[str, str]]:
                blinking.polls += 1
                if blinking.polls <= blinking.outages:
                    raise ServiceUnavailableError("Kafka did not answer (a restart)")
                if blinking.over is not None:
                    blinking.over.touch()  # the run ends only once telemetry is read again
                return lines.poll()

            def close(self) -> None:
                lines.close()

        return Follower()


def test_following_rides_through_a_telemetry_outage(
    orchestrator: LocalOrchestrator, tmp_path: Path
) -> None:
    over = tmp_path / "outage-over"
    trainer = f"import os, time\nwhile not os.path.exists({str(over)!r}): time.sleep(0.01)"
    orchestrator.submit(run_of("d6", trainer, worker=trainer))
    blinking = _Blinking(orchestrator, outages=3, over=over)
    outcome = follow(blinking, "d6", poll_s=0.05)  # type: ignore[arg-type]
    assert blinking.polls > 3  # read again after the outage, then the run ended
    assert outcome.state is RunState.COMPLETE and outcome.failure is None


def test_an_outage_longer_than_the_limit_ends_the_follow_and_stops_the_run(
    orchestrator: LocalOrchestrator,
) -> None:
    orchestrator.submit(run_of("d7", SLEEP))
    blinking = _Blinking(orchestrator, outages=10**6)
    with pytest.raises(ServiceUnavailableError, match="a restart"):
        follow(blinking, "d7", poll_s=0.05, outage_s=0.3)  # type: ignore[arg-type]
    assert orchestrator.record("d7").state.terminal  # a failed foreground launch stops its run
