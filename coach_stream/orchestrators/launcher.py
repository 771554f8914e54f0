"""Launching a run and following it to its end: what `coach-stream launch` does, as a library.

The CLI, the end-to-end tests and ``bench/solve.py`` all launch runs the same way::

    settings = LaunchSettings(preset="cartpole-ppo", run_id=new_run_id("cartpole-ppo"), ...)
    prepare_topics(settings)                       # fail fast if Kafka does not answer
    orchestrator.submit(build_run_spec(settings))
    outcome = follow(orchestrator, settings.run_id, on_update=render)

``follow`` reads the tasks' JSON event lines until the trainer prints ``finished`` (or
the run ends otherwise), lets the other tasks exit on ``RunFinished``, then stops
whatever is left, so no process outlives the run it belonged to.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coach_stream.orchestrators.local import LocalOrchestrator
from coach_stream.orchestrators.progress import LogFollower, RunProgress
from coach_stream.orchestrators.spec import LaunchSettings
from coach_stream.orchestrators.state import RunRecord, RunState

UpdateCallback = Callable[[RunProgress, RunRecord], None]


@dataclass(frozen=True)
class RunOutcome:
    """How a followed run ended."""

    run_id: str
    state: RunState
    progress: RunProgress
    wall_s: float
    """From the start of ``follow`` to the trainer's ``finished`` line (or the run's end)."""
    timed_out: bool = False

    @property
    def finished(self) -> dict[str, Any] | None:
        return self.progress.finished

    @property
    def reason(self) -> str | None:
        reason = self.finished.get("reason") if self.finished else None
        return str(reason) if reason is not None else None

    @property
    def solved(self) -> bool:
        return self.reason == "target_reached"

    @property
    def checkpoint_uri(self) -> str | None:
        uri = self.finished.get("checkpoint_uri") if self.finished else None
        return str(uri) if uri is not None else None


def prepare_topics(settings: LaunchSettings, broker_timeout_s: float = 10.0) -> None:
    """Create the run's topics (idempotent; the trainer would too) before any task starts.

    Doing it here turns an unreachable broker into one clear error at launch instead of
    N crash-looping processes.
    """
    from coach_stream.transport.admin import check_broker, ensure_run_topics
    from coach_stream.transport.settings import KafkaSettings, RunTopics

    kafka = KafkaSettings(bootstrap_servers=settings.kafka_bootstrap)
    check_broker(kafka, timeout=broker_timeout_s)
    ensure_run_topics(kafka, RunTopics.for_run(settings.run_id), settings.workers)


def follow(
    orchestrator: LocalOrchestrator,
    run_id: str,
    *,
    eval_episodes: int = 20,
    on_update: UpdateCallback | None = None,
    timeout_s: float | None = None,
    poll_s: float = 0.5,
) -> RunOutcome:
    """Follow a submitted run until it ends; the run is fully stopped when this returns."""
    started = time.monotonic()
    follower = LogFollower(orchestrator.run_dir(run_id).logs_dir)
    progress = RunProgress(eval_episodes=eval_episodes)
    ended_at: float | None = None
    timed_out = False
    try:
        while True:
            for task, line in follower.poll():
                progress.feed(task, line)
            record = orchestrator.record(run_id)
            if on_update is not None:
                on_update(progress, record)
            if progress.finished is not None or record.state.terminal:
                ended_at = time.monotonic()
                break
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                timed_out = True
                break
            time.sleep(poll_s)
        if not timed_out:
            # Workers exit by themselves on RunFinished; the supervisor stops laggards.
            config = record.config
            with contextlib.suppress(TimeoutError):
                orchestrator.wait(run_id, timeout=config.linger_s + config.stop_grace_s + 10.0)
    finally:
        orchestrator.stop(run_id)
    for task, line in follower.poll():
        progress.feed(task, line)
    record = orchestrator.record(run_id)
    if on_update is not None:
        on_update(progress, record)
    wall = (ended_at if ended_at is not None else time.monotonic()) - started
    return RunOutcome(run_id, record.state, progress, wall, timed_out)
