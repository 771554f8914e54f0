"""Launching a run and following it to its end: what `coach-stream launch` does, as a library.

The CLI, the end-to-end tests and ``bench/solve.py`` all launch runs the same way::

    settings = LaunchSettings(preset="cartpole-ppo", run_id=new_run_id("cartpole-ppo"), ...)
    claim_run_id(settings)                         # the id is this launch's, or refused
    prepare_topics(settings)                       # fail fast if Kafka does not answer
    orchestrator.submit(build_run_spec(settings))
    outcome = follow(orchestrator, settings.run_id, on_update=render)

``validate_launch`` checks everything that can be checked before anything is created (the
environment, the broker and the store answer, the run id is free in both),
``claim_run_id`` takes the id atomically (one of any number of concurrent launches wins),
and ``discard_launch`` removes what the winner created when it fails part-way, so a
refused or failed launch leaves nothing behind and a losing one touches nothing.

``follow`` reads the tasks' JSON event lines until the trainer prints ``finished`` (or
the run ends otherwise), lets the other tasks exit on ``RunFinished``, then stops
whatever is left, so no process outlives the run it belonged to.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from coach_stream.errors import ConfigError, ServiceUnavailableError
from coach_stream.observability.fold import RunTelemetry
from coach_stream.orchestrators.plan import Orchestrator
from coach_stream.orchestrators.spec import LaunchSettings
from coach_stream.orchestrators.state import RunRecord, RunState

if TYPE_CHECKING:
    from coach_stream.config import Preset

log = logging.getLogger(__name__)

UpdateCallback = Callable[[RunTelemetry, RunRecord], None]


class TaskLines(Protocol):
    """New output lines of a run's tasks, each as ``(task, line)``, since the last poll."""

    def poll(self) -> list[tuple[str, str]]: ...


class FollowableOrchestrator(Orchestrator, Protocol):
    """``plan.Orchestrator`` plus what following a run live needs: its tasks' new lines as
    they come, the run's record (state, task states) and a wait for its end.

    ``LocalOrchestrator`` reads the record from run.json and the lines from the run's log
    files (or its telemetry topic); ``NomadOrchestrator`` asks Nomad's API for the record
    and reads the lines from the telemetry topic. ``follow`` needs nothing else.
    """

    def task_lines(self, run_id: str) -> TaskLines: ...

    def record(self, run_id: str) -> RunRecord: ...

    def wait(self, run_id: str, timeout: float) -> RunState: ...


@dataclass(frozen=True)
class RunOutcome:
    """How a followed run ended."""

    run_id: str
    state: RunState
    progress: RunTelemetry
    """Every event of the run the follow read."""
    wall_s: float
    """From the start of ``follow`` to the trainer's ``finished`` line (or the run's end)."""
    record: RunRecord
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
    def failure(self) -> str | None:
        """Why the run failed at once: a task's own last error line (it exited 2)."""
        return self.record.failure

    @property
    def checkpoint_uri(self) -> str | None:
        uri = self.finished.get("checkpoint_uri") if self.finished else None
        return str(uri) if uri is not None else None


def prepare_topics(settings: LaunchSettings, experience_retention: str = "forever") -> None:
    """Create the run's topics (idempotent; the trainer would too) before any task starts.

    Doing it here turns an unreachable broker into one clear error at launch instead of
    N crash-looping processes: ``ensure_run_topics`` asks for metadata before it creates
    anything and fails within seconds when no broker answers (a separate broker check
    first cost another client and ~70 ms of every launch).
    """
    from coach_stream.transport.admin import ensure_run_topics
    from coach_stream.transport.retention import parse_retention
    from coach_stream.transport.settings import RunTopics

    kafka = settings.kafka_settings()
    retention = parse_retention(experience_retention)
    ensure_run_topics(
        kafka,
        RunTopics.for_run(settings.run_id),
        settings.workers,
        experience_retention_ms=retention.ms,
        experience_retention_bytes=retention.bytes,
    )


def validate_launch(settings: LaunchSettings, preset: Preset, timeout_s: float = 5.0) -> None:
    """Refuse a launch that could only fail, before it creates anything: a ``ConfigError``.

    Checked: the environment can be made (and has the spaces the algorithms support), the
    broker answers and holds no topic of this run id, the checkpoint store answers (the
    bucket exists) and holds no object of this run id. A run id reused after a finished
    run would otherwise "finish" at once on that run's announcements, training nothing.
    """
    check_env(preset)
    try:
        check_kafka_run_free(settings, timeout_s)
        check_store_run_free(settings, timeout_s)
    except ServiceUnavailableError as error:
        # At launch an unreachable service is an address to fix, not a blip to wait out.
        raise ConfigError(str(error)) from None


def check_env(preset: Preset) -> None:
    """The preset's env (wrapped) can be made (its gymnasium extra is installed) and its
    spaces fit the algorithm: DQN acts on discrete actions only, SAC on continuous (Box)
    ones only; observations to normalise are not images."""
    from coach_stream.algorithms import BUILDERS
    from coach_stream.envs import probe_shape  # gymnasium: only when a launch needs it

    env_id, algorithm = preset.env_id, preset.algorithm
    shape = probe_shape(env_id, preset.env_wrappers)
    preset.check_normalizable(tuple(shape.obs_shape), str(shape.obs_dtype))
    builder = BUILDERS.get(algorithm)
    needs = None if builder is None else builder.continuous_actions
    if needs is not None and shape.continuous is not needs:
        has, other = ("continuous (Box)", "ppo or sac") if shape.continuous else ("discrete", "ppo")
        wanted = "continuous (Box)" if needs else "discrete"
        raise ConfigError(
            f"Algorithm {algorithm!r} needs {wanted} actions and {env_id} has {has} ones; "
            f"use {other} for {env_id}, or an env_id with {wanted} actions."
        )


def check_kafka_run_free(settings: LaunchSettings, timeout_s: float = 10.0) -> None:
    """The broker answers and has none of the run's topics."""
    from coach_stream.transport.admin import check_broker
    from coach_stream.transport.settings import RunTopics

    kafka = settings.kafka_settings()
    metadata = check_broker(kafka, timeout=timeout_s)
    topics = RunTopics.for_run(settings.run_id)
    taken = [
        t
        for t in (topics.experience, topics.control, topics.dead_letter, topics.telemetry)
        if t in metadata.topics
    ]
    if taken:
        raise ConfigError(
            f"Run id {settings.run_id!r} is already used in Kafka at {kafka.bootstrap_servers} "
            f"(topics {', '.join(taken)} exist); choose another --run-id."
        )


def check_store_run_free(settings: LaunchSettings, timeout_s: float = 10.0) -> None:
    """The checkpoint store answers (the bucket exists) and holds nothing of the run."""
    with _run_store(settings, timeout_s) as store:
        found = _run_objects(store, settings.run_id)
    if found:
        raise ConfigError(
            f"Run id {settings.run_id!r} is already used in the checkpoint store "
            f"{settings.checkpoints} ({len(found)} objects, e.g. {found[0]}); choose another "
            "--run-id."
        )


def _run_store(settings: LaunchSettings, timeout_s: float) -> Any:
    """The run's checkpoint store (a ``GcsCheckpointStore`` or ``LocalCheckpointStore``)."""
    # Imported here: the checkpoints package imports torch (~3 s), which `launch` does not
    # otherwise need.
    from coach_stream.checkpoints import (
        GcsCheckpointStore,
        GcsLocation,
        LocalCheckpointStore,
        RetryPolicy,
        parse_store_url,
    )

    where = parse_store_url(settings.checkpoints)
    if isinstance(where, GcsLocation):
        return GcsCheckpointStore(
            where.bucket,
            where.prefix,
            emulator_host=settings.gcs_emulator,
            retry=RetryPolicy(attempts=3, initial_backoff_s=0.2, deadline_s=timeout_s / 2),
            timeout_s=timeout_s / 2,
        )
    _check_creatable(where)
    return LocalCheckpointStore(where)


def _run_objects(store: Any, run_id: str) -> list[str]:
    from coach_stream.checkpoints.keys import policies_prefix, trainer_prefix

    return [*store.list(policies_prefix(run_id)), *store.list(trainer_prefix(run_id))]


def unwritable_ancestor(directory: Path) -> Path | None:
    """None when ``directory`` is one, or can be created, and this user may write there;
    else the nearest existing path that stops it."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.is_dir() and os.access(existing, os.W_OK | os.X_OK):
        return None
    return existing


def _check_creatable(root: Path) -> None:
    """``root`` is a directory, or can become one, that this user may write to."""
    existing = unwritable_ancestor(root)
    if existing is not None:
        raise ConfigError(
            f"The checkpoint directory {root} cannot be created ({existing} is not a "
            "writable directory); fix --checkpoints."
        )


def claim_run_id(settings: LaunchSettings) -> None:
    """Make the run id this launch's, atomically: create the run's control topic exclusively.

    ``validate_launch`` only says the id *was* free; two launches of one id at the same
    moment both pass it. Kafka's controller creates a topic name once, so exactly one of
    them gets here; the others are refused (``ConfigError``) and must undo nothing, since
    everything of the id belongs to the winner (docs/decisions.md).
    """
    from coach_stream.transport.admin import claim_topic, plan_run_topics
    from coach_stream.transport.settings import RunTopics

    kafka = settings.kafka_settings()
    topics = RunTopics.for_run(settings.run_id)
    plans = plan_run_topics(kafka, topics, settings.workers)
    control = next(plan for plan in plans if plan.name == topics.control)
    try:
        won = claim_topic(kafka, control)
    except ServiceUnavailableError as error:
        raise ConfigError(str(error)) from None
    if not won:
        raise ConfigError(
            f"Run id {settings.run_id!r} was taken by another launch a moment ago (topic "
            f"{topics.control} exists); choose another --run-id."
        )


def discard_launch(
    settings: LaunchSettings, state_dir: Path | None, *, timeout_s: float = 10.0
) -> None:
    """Undo a launch that failed before its run started: its topics, its checkpoints (a
    trainer may have written version 0) and its run directory (``state_dir``; None: keep).

    Only for a launch that won ``claim_run_id``: everything of the id is its own.
    """
    from coach_stream.transport.admin import delete_run_topics
    from coach_stream.transport.settings import RunTopics

    kafka = settings.kafka_settings()
    with contextlib.suppress(Exception):  # best effort: the launch's own error is the news
        delete_run_topics(kafka, RunTopics.for_run(settings.run_id))
    with contextlib.suppress(Exception), _run_store(settings, timeout_s) as store:
        for key in _run_objects(store, settings.run_id):
            store.delete(key)
        root = getattr(store, "root", None)
        if isinstance(root, Path):
            # A local store: a task stopped in the middle of a write leaves its hidden
            # temporary file, which no listing shows; the run's directory goes whole.
            shutil.rmtree(root / "runs" / settings.run_id, ignore_errors=True)
    if state_dir is not None:
        shutil.rmtree(state_dir / "runs" / settings.run_id, ignore_errors=True)


class _Outage:
    """How long the run's telemetry has been unreadable, and whether that is still a blip."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.since: float | None = None

    def lines(self, follower: TaskLines) -> list[tuple[str, str]]:
        try:
            lines = follower.poll()
        except ServiceUnavailableError as error:
            now = time.monotonic()
            if self.since is None:
                self.since = now
                log.warning(
                    "run telemetry unreadable (%s); asking again for %g s", error, self.limit_s
                )
            if now - self.since > self.limit_s:
                raise
            return []
        if self.since is not None:
            log.warning("run telemetry readable again after %.1f s", time.monotonic() - self.since)
            self.since = None
        return lines


def follow(
    orchestrator: FollowableOrchestrator,
    run_id: str,
    *,
    eval_episodes: int = 20,
    on_update: UpdateCallback | None = None,
    timeout_s: float | None = None,
    poll_s: float = 0.5,
    outage_s: float = 120.0,
) -> RunOutcome:
    """Follow a submitted run until it ends; the run is fully stopped when this returns.

    The run's tasks ride through a broker restart, so its follower does too: telemetry
    that cannot be read is asked again each ``poll_s`` (the tasks' states still come from
    the orchestrator) and only an outage longer than ``outage_s`` ends the follow with the
    ``ServiceUnavailableError`` (and stops the run, as any failure of a foreground launch).
    """
    started = time.monotonic()
    follower = orchestrator.task_lines(run_id)
    progress = RunTelemetry(run_id, eval_episodes=eval_episodes)
    ended_at: float | None = None
    timed_out = False
    outage = _Outage(outage_s)
    try:
        while True:
            for task, line in outage.lines(follower):
                progress.feed_line(task, line)
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
    for task, line in outage.lines(follower):
        progress.feed_line(task, line)
    record = orchestrator.record(run_id)
    if on_update is not None:
        on_update(progress, record)
    wall = (ended_at if ended_at is not None else time.monotonic()) - started
    return RunOutcome(run_id, record.state, progress, wall, record, timed_out)
