"""End-to-end training runs on the real broker and fake-gcs-server: the main job, for real.

Each test launches a whole run (trainer, rollout workers, evaluator) as supervised local
processes and follows it through the tasks' JSON event lines, exactly as
``coach-stream launch`` does. "Solved" is the trainer's own verdict: the mean greedy
return over the last 20 evaluation episodes reached the preset's target (475) within the
preset's env-step budget.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from coach_stream.config import load_preset
from coach_stream.observability.fold import RunTelemetry, parse_event
from coach_stream.orchestrators import (
    LaunchSettings,
    LocalOrchestrator,
    RunState,
    build_run_spec,
)
from coach_stream.orchestrators.launcher import RunOutcome, follow, prepare_topics
from coach_stream.orchestrators.plan import TaskState
from coach_stream.orchestrators.progress import LogFollower, fold_run_logs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

RUN_TIMEOUT_S = 900.0  # generous: CI machines are small and shared


def launch(
    orchestrator: LocalOrchestrator,
    preset: str,
    run_id: str,
    kafka: str,
    checkpoints: str,
    *,
    workers: int = 2,
    restart_workers: bool = True,
    gcs_emulator: str | None = None,
) -> None:
    settings = LaunchSettings(
        preset=preset,
        run_id=run_id,
        workers=workers,
        kafka_bootstrap=kafka,
        checkpoints=checkpoints,
        gcs_emulator=gcs_emulator,
        restart_workers=restart_workers,
    )
    prepare_topics(settings)
    orchestrator.submit(build_run_spec(settings))


def explain(orchestrator: LocalOrchestrator, run_id: str) -> str:
    """The end of every task's log, for an assertion message worth reading."""
    lines = list(orchestrator.logs(run_id))
    return "\n".join(lines[-60:])


def assert_solved(outcome: RunOutcome, orchestrator: LocalOrchestrator, preset: str) -> None:
    target = load_preset(preset)
    finished = outcome.finished
    assert finished is not None and outcome.solved, explain(orchestrator, outcome.run_id)
    assert finished["eval_mean_return"] >= target.target_return
    assert finished["env_steps"] <= target.env_step_budget
    assert outcome.state is RunState.COMPLETE
    assert outcome.checkpoint_uri
    statuses = {s.name: s for s in orchestrator.status(outcome.run_id)}
    assert statuses["trainer"].state is TaskState.COMPLETE


def wait_for(
    orchestrator: LocalOrchestrator,
    run_id: str,
    condition: str,
    check: Callable[[RunTelemetry], bool],
) -> RunTelemetry:
    """Follow the logs until ``check(progress)`` holds (e.g. the trainer's 5th version)."""
    follower = LogFollower(orchestrator.run_dir(run_id).logs_dir)
    progress = RunTelemetry(run_id)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not check(progress):
        assert time.monotonic() < deadline, f"{condition} never happened\n" + explain(
            orchestrator, run_id
        )
        assert progress.finished is None, (
            f"the run ended before {condition}: {progress.finished}\n"
            + explain(orchestrator, run_id)
        )
        for task, line in follower.poll():
            progress.feed_line(task, line)
        time.sleep(0.2)
    return progress


def wait_for_pid(orchestrator: LocalOrchestrator, run_id: str, task: str) -> int:
    """The pid of ``task`` once the supervisor has started it."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        status = {s.name: s for s in orchestrator.status(run_id)}
        if task in status and status[task].pid is not None:
            return int(status[task].pid)  # type: ignore[arg-type]
        assert time.monotonic() < deadline, f"{task} never started\n" + explain(
            orchestrator, run_id
        )
        time.sleep(0.05)


@contextlib.contextmanager
def evaluator_held(orchestrator: LocalOrchestrator, run_id: str) -> Iterator[None]:
    """SIGSTOP the evaluator for the block. Only its reports can end a run, so the run is
    still training inside the block however fast this machine solves CartPole (~3 s)."""
    pid = wait_for_pid(orchestrator, run_id, "evaluator")
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_cartpole_ppo_sync_solves_through_the_cli_with_gcs_checkpoints(
    kafka_bootstrap: str, gcs_endpoint: str, unique_name: str, tmp_path: Path
) -> None:
    client = storage.Client(
        project="coach-stream-test",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": gcs_endpoint},
    )
    bucket = client.create_bucket(f"e2e-{unique_name}")
    run_id = f"e2e-ppo-{unique_name}"
    state_dir = tmp_path / "state"
    command = [
        sys.executable, "-m", "coach_stream.cli.main", "launch", "cartpole-ppo",
        "--workers", "2", "--run-id", run_id, "--state-dir", str(state_dir),
        "--kafka", kafka_bootstrap, "--checkpoints", f"gs://{bucket.name}/ckpt",
        "--gcs-emulator", gcs_endpoint, "--timeout", str(RUN_TIMEOUT_S),
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S + 120)
    finally:
        LocalOrchestrator(state_dir).stop(run_id)
    orchestrator = LocalOrchestrator(state_dir)
    assert done.returncode == 0, done.stderr[-3000:] + explain(orchestrator, run_id)
    assert f"run {run_id}: target_reached" in done.stdout
    assert f"checkpoint: gs://{bucket.name}/ckpt/" in done.stdout
    assert "final evaluation: mean return" in done.stdout

    progress = fold_run_logs(orchestrator.run_dir(run_id).logs_dir, run_id)
    assert progress.finished is not None
    assert progress.finished["eval_mean_return"] >= 475.0
    assert progress.finished["env_steps"] <= load_preset("cartpole-ppo").env_step_budget
    final = progress.finished["checkpoint_uri"]
    assert bucket.blob(final.removeprefix(f"gs://{bucket.name}/")).exists()
    assert orchestrator.record(run_id).state is RunState.COMPLETE
    assert all(not s.pid or not Path(f"/proc/{s.pid}").exists() or s.state is TaskState.COMPLETE
               for s in orchestrator.status(run_id))  # fmt: skip


@pytest.mark.parametrize("preset", ["cartpole-dqn", "cartpole-ppo"])
def test_trainer_kill_9_resumes_from_stored_positions_and_still_solves(
    orchestrator: LocalOrchestrator,
    kafka_bootstrap: str,
    unique_name: str,
    tmp_path: Path,
    preset: str,
) -> None:
    run_id = f"e2e-resume-{unique_name}"
    launch(orchestrator, preset, run_id, kafka_bootstrap, (tmp_path / "ckpt").as_uri())
    with evaluator_held(orchestrator, run_id):  # so the trainer is killed mid-run
        before = wait_for(
            orchestrator, run_id, "the trainer's 4th policy version",
            lambda p: (p.figure("time/policy_version") or 0) >= 4,
        )  # fmt: skip
        trainer = orchestrator.status(run_id)[0]
        assert trainer.name == "trainer" and trainer.pid is not None
        assert trainer.state is TaskState.RUNNING
        os.kill(trainer.pid, signal.SIGKILL)
    outcome = follow(orchestrator, run_id, timeout_s=RUN_TIMEOUT_S)

    assert_solved(outcome, orchestrator, preset)
    assert orchestrator.status(run_id)[0].restarts == 1
    assert outcome.progress.trainer_starts == 2
    [resumed] = outcome.progress.resumed
    assert resumed["from_version"] >= 1  # a stored trainer state, not a fresh start
    assert resumed["env_steps"] > 0 and resumed["positions"]
    assert resumed["env_steps"] <= (before.env_steps or 0) + 50_000
    if preset == "cartpole-dqn":  # the replay buffer came back from the log
        refilled = [
            event
            for task, line in LogFollower(orchestrator.run_dir(run_id).logs_dir).poll()
            if task == "trainer" and (event := _event(line)) and event["event"] == "refilled"
        ]
        assert refilled and refilled[0]["chunks"] > 0


def _event(line: str) -> dict[str, Any] | None:
    return parse_event(line)


def test_sync_run_with_a_worker_killed_mid_run_completes(
    orchestrator: LocalOrchestrator, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    run_id = f"e2e-deadworker-{unique_name}"
    launch(
        orchestrator, "cartpole-ppo", run_id, kafka_bootstrap, (tmp_path / "ckpt").as_uri(),
        workers=3, restart_workers=False,
    )  # fmt: skip
    # Held, the evaluator cannot end the run before the kill, nor until the trainer has
    # gone on without the dead worker.
    with evaluator_held(orchestrator, run_id):
        before = wait_for(
            orchestrator, run_id, "the trainer's 3rd policy version",
            lambda p: (p.figure("time/policy_version") or 0) >= 3,
        )  # fmt: skip
        victim = {s.name: s for s in orchestrator.status(run_id)}["rollout-1"]
        assert victim.pid is not None and victim.state is TaskState.RUNNING
        os.kill(victim.pid, signal.SIGKILL)
        killed_at = before.figure("time/policy_version") or 0
        wait_for(
            orchestrator, run_id, "2 more policy versions without rollout-1",
            lambda p: (p.figure("time/policy_version") or 0) >= killed_at + 2,
        )  # fmt: skip
    outcome = follow(orchestrator, run_id, timeout_s=RUN_TIMEOUT_S)

    assert_solved(outcome, orchestrator, "cartpole-ppo")
    statuses = {s.name: s for s in orchestrator.status(run_id)}
    assert statuses["rollout-1"].state is TaskState.FAILED  # stayed dead: nobody restarted it
    assert statuses["rollout-1"].exit_code == -signal.SIGKILL
    assert statuses["rollout-0"].restarts == statuses["rollout-2"].restarts == 0
