"""``coach-stream status RUN [--watch]``: a run's status view, from Kafka alone.

The run's telemetry topic (every task's events) and the broker (consumer lag, dead
letters) are all it reads, so a local run and a run on Nomad are shown alike, from any
machine that reaches the broker. ``--watch`` refreshes the view in place until the run
finishes or Ctrl-C (exit 130); without it, one snapshot. ``--tensorboard DIR`` also
(re)writes the run's TensorBoard scalars and CSV from the topic (``observability.scalars``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.live import Live

from coach_stream.core import ClosingContext
from coach_stream.errors import ServiceUnavailableError
from coach_stream.observability.fold import RunTelemetry
from coach_stream.observability.scalars import ScalarLog
from coach_stream.observability.status import (
    RunStatus,
    build_status,
    render_status,
    reported_positions,
)
from coach_stream.transport.admin import check_broker
from coach_stream.transport.lag import BrokerProbe
from coach_stream.transport.names import trainer_group
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.telemetry import TelemetryReader

_READ_TO_END_S = 30.0  # the first look reads the whole topic: a long run has many events


def telemetry_exists(settings: KafkaSettings, run_id: str, timeout: float = 5.0) -> bool:
    """Whether the broker answers and has the run's telemetry topic (a run it can show)."""
    topic = RunTopics.for_run(run_id).telemetry
    try:
        return topic in check_broker(settings, timeout=timeout).topics
    except ServiceUnavailableError:
        return False


def fold_run_topic(settings: KafkaSettings, run_id: str, eval_episodes: int = 20) -> RunTelemetry:
    """Every event on the run's telemetry topic so far, folded; a ``CoachStreamError`` when
    the topic cannot be read."""
    telemetry = RunTelemetry(run_id, eval_episodes=eval_episodes)
    topics = RunTopics.for_run(run_id)
    with TelemetryReader(settings, topics, timeout_s=5.0) as reader:
        for task, event in reader.read_to_end(10.0):
            telemetry.feed(task, event)
    return telemetry


class StatusSource(ClosingContext):
    """The run's telemetry folded so far and the broker's figures: ``refresh()`` -> status."""

    def __init__(
        self,
        settings: KafkaSettings,
        run_id: str,
        scalars: ScalarLog | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        topics = RunTopics.for_run(run_id)
        self.telemetry = RunTelemetry(run_id)
        self._settings, self._topics, self._group = settings, topics, trainer_group(run_id)
        self._reader = TelemetryReader(settings, topics)
        self._probe: BrokerProbe | None = None  # once the telemetry says which topic it reads
        self._scalars, self._clock = scalars, clock
        self._caught_up = False

    def _feed(self, events: list[tuple[str, dict[str, object]]]) -> None:
        for task, event in events:
            self.telemetry.feed(task, event)
            if self._scalars is not None:
                self._scalars.write(task, event)
        if self._scalars is not None and events:
            self._scalars.flush()

    def refresh(self, wait_s: float = 0.0) -> RunStatus:
        """Fold what arrived (the whole topic the first time; then for up to ``wait_s``)."""
        if not self._caught_up:
            self._feed(self._reader.read_to_end(_READ_TO_END_S))
            self._caught_up = True
        deadline = time.monotonic() + wait_s
        while True:
            self._feed(self._reader.poll(max(0.0, min(0.5, deadline - time.monotonic()))))
            if time.monotonic() >= deadline:
                break
        broker = self._broker_probe().figures(reported_positions(self.telemetry.trainer))
        return build_status(self.telemetry, broker, self._clock())

    def _broker_probe(self) -> BrokerProbe:
        """The probe of the experience topic the trainer reads: a shadow learner's is its
        source run's (``coach-stream attach``), read in the shadow's own group."""
        if self._probe is None:
            topics, source = self._topics, self.telemetry.run_info.get("experience_from")
            if isinstance(source, str) and source:
                topics = topics.reading_experience_of(source)
            self._probe = BrokerProbe(self._settings, topics, self._group)
        return self._probe

    def close(self) -> None:
        try:
            self._reader.close()
        finally:
            if self._probe is not None:
                self._probe.close()


def show_status(
    settings: KafkaSettings,
    run_id: str,
    *,
    watch: bool,
    interval_s: float = 2.0,
    tensorboard: Path | None = None,
    console: Console | None = None,
    ended: str | None = None,
) -> RunStatus:
    """Print the view once, or (``watch``) keep it refreshed until the run finishes.

    ``ended``: the orchestrator's word that the run's tasks no longer run (a purged or
    stopped Nomad job). Unless the telemetry says the run finished, it is the run's state
    (the last events may be seconds old and read as "running"), and there is nothing to
    watch.

    Ctrl-C propagates as ``KeyboardInterrupt`` (the command turns it into exit 130); the
    live display is closed first, so the terminal is left clean.
    """
    out = console or Console(highlight=False)
    scalars = ScalarLog(tensorboard, run_id) if tensorboard is not None else None
    try:
        with StatusSource(settings, run_id, scalars) as source:
            status = source.refresh()
            if ended is not None and source.telemetry.finished is None:
                word = ended.split(":", 1)[0]  # each task that did not exit: gone, stopped
                tasks = tuple(
                    t if t.state.startswith("exited") else dataclasses.replace(t, state=word)
                    for t in status.tasks
                )
                status = dataclasses.replace(status, state=ended, tasks=tasks)
                out.print(render_status(status))
                return status
            if not watch:
                out.print(render_status(status))
                return status
            with Live(render_status(status), console=out, auto_refresh=False) as live:
                while source.telemetry.finished is None:
                    status = source.refresh(wait_s=interval_s)
                    live.update(render_status(status), refresh=True)
            return status
    finally:
        if scalars is not None:
            scalars.close()


class TelemetryScalars(ClosingContext):
    """The launcher's TensorBoard/CSV writer: ``poll()`` at each refresh of its live view
    writes what arrived; ``close()`` reads the topic to its end first (the last events)."""

    def __init__(self, settings: KafkaSettings, run_id: str, directory: Path) -> None:
        self._reader = TelemetryReader(settings, RunTopics.for_run(run_id))
        self._log = ScalarLog(directory, run_id)
        self.path = self._log.path

    def _write(self, events: list[tuple[str, dict[str, object]]]) -> None:
        for task, event in events:
            self._log.write(task, event)
        self._log.flush()

    def poll(self) -> None:
        self._write(self._reader.poll(0.0))

    def close(self) -> None:
        try:
            self._write(self._reader.read_to_end(_READ_TO_END_S))
        except ServiceUnavailableError:
            pass  # the broker went away: what was written stays
        finally:
            self._reader.close()
            self._log.close()
