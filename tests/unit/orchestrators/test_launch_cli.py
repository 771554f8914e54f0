"""`follow`, and `status`/`logs`/`stop` from another process' point of view, on stand-in tasks."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from coach_stream.cli.main import main
from coach_stream.orchestrators import LocalOrchestrator, RunState, SupervisorConfig
from coach_stream.orchestrators.launcher import follow
from coach_stream.orchestrators.plan import RunSpec, TaskSpec, TaskState
from coach_stream.processes import group_members
from coach_stream.testing.waiting import wait_until

FAST = SupervisorConfig(initial_backoff_s=0.1, poll_interval_s=0.02, stop_grace_s=2.0, linger_s=0.3)

TRAINER = """
import json, time
for step in (100, 200):
    print(json.dumps({"event": "progress", "time/env_steps": step,
                      "time/policy_version": step // 100}))
    time.sleep(0.05)
print("some human log line", flush=True)
print(json.dumps({"event": "finished", "reason": "target_reached", "final_version": 2,
                  "checkpoint_uri": "file:///ckpt/00000002.pt"}), flush=True)
"""
EVALUATOR = """
import json, time
print(json.dumps({"event": "evaluation", "mean_return": 500.0, "episodes": 20}), flush=True)
time.sleep(120)
"""
SLEEP = "import time; time.sleep(120)"


def stand_in_run(run_id: str, trainer: str = TRAINER) -> RunSpec:
    def task(name: str, group: str, code: str) -> TaskSpec:
        return TaskSpec(name, group, (sys.executable, "-c", code))

    return RunSpec(
        run_id,
        (
            task("trainer", "trainer", trainer),
            task("rollout-0", "rollout", SLEEP),
            task("evaluator", "evaluator", EVALUATOR),
        ),
    )


@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[LocalOrchestrator]:
    orchestrator = LocalOrchestrator(tmp_path / "state", config=FAST)
    yield orchestrator
    for run_id in orchestrator.runs():
        orchestrator.stop(run_id)


def test_follow_reads_the_run_to_its_end_and_leaves_nothing(
    orchestrator: LocalOrchestrator,
) -> None:
    orchestrator.submit(stand_in_run("f1"))
    seen: list[int | None] = []

    outcome = follow(
        orchestrator, "f1", on_update=lambda p, r: seen.append(p.env_steps), poll_s=0.05
    )

    assert outcome.solved and outcome.reason == "target_reached"
    assert outcome.checkpoint_uri == "file:///ckpt/00000002.pt"
    assert outcome.progress.env_steps == 200
    assert outcome.state is RunState.COMPLETE
    assert seen and seen[-1] == 200
    record = orchestrator.record("f1")
    assert {t.spec.name: t.state for t in record.tasks}["trainer"] is TaskState.COMPLETE
    assert all(not group_members(t.process) for t in record.tasks if t.process)


def test_follow_times_out_and_stops_the_run(orchestrator: LocalOrchestrator) -> None:
    orchestrator.submit(stand_in_run("f2", trainer=SLEEP))
    outcome = follow(orchestrator, "f2", timeout_s=0.5, poll_s=0.05)
    assert outcome.timed_out and not outcome.solved
    assert outcome.state is RunState.STOPPED


def test_status_logs_and_stop_commands(
    orchestrator: LocalOrchestrator, capsys: pytest.CaptureFixture[str]
) -> None:
    orchestrator.submit(stand_in_run("c1", trainer=EVALUATOR.replace("evaluation", "progress")))
    state = ["--state-dir", str(orchestrator.state_dir)]

    assert main(["status", *state]) == 0
    assert "c1  running" in capsys.readouterr().out

    assert main(["status", "c1", "--json", *state]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["state"] == "running"
    assert [t["name"] for t in shown["tasks"]] == ["trainer", "rollout-0", "evaluator"]

    # Stop only once the evaluator has written its line, which the logs check reads below.
    wait_until(
        lambda: '"mean_return"' in "".join(orchestrator.logs("c1", "evaluator")),
        timeout=30,
        what="the evaluator's line",
    )
    assert main(["stop", "c1", *state]) == 0
    assert "run c1: stopped" in capsys.readouterr().out
    assert orchestrator.record("c1").state is RunState.STOPPED

    assert main(["logs", "c1", "--task", "evaluator", *state]) == 0
    assert '"mean_return": 500.0' in capsys.readouterr().out
    assert main(["logs", "c1", "--follow", *state]) == 0  # the run is over: prints and returns
    assert "[trainer] " in capsys.readouterr().out


def test_unknown_runs_and_tasks_are_one_clear_line(
    orchestrator: LocalOrchestrator, capsys: pytest.CaptureFixture[str]
) -> None:
    state = ["--state-dir", str(orchestrator.state_dir)]
    assert main(["status", "nope", *state]) == 2
    assert "No run 'nope'" in capsys.readouterr().err
    orchestrator.submit(stand_in_run("c2"))
    assert main(["logs", "c2", "--task", "nobody", *state]) == 2
    assert "has no task 'nobody'" in capsys.readouterr().err
