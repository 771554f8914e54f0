"""Run telemetry on Kafka: every task's events on ``<prefix>.<run_id>.telemetry``.

Tasks report through an ``EventSink``; besides the JSON lines on stdout (the local
orchestrator's logs), ``TelemetrySink`` publishes each event as an Avro ``TelemetryEvent``
to the run's telemetry topic (one partition, keyed by task name). Whoever follows a run,
the launcher's live view, ``coach-stream status`` or a test, reads the topic with
``TelemetryReader``, so a run on Nomad (its tasks on other nodes, their stdout there) is
followed from any machine that reaches the broker::

    events = fan_out(JsonLines(sys.stdout, "trainer"), TelemetrySink(kafka, topics, run, "trainer"))
    ...
    with TelemetryReader(kafka, topics) as reader:
        for task, event in reader.read_to_end(10.0):
            progress.feed_event(task, event)

Telemetry never stops training: a sink whose broker does not answer logs a warning and
drops events (stdout still has them); only the experience and control paths must deliver.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from coach_stream.codec import SingleObjectCodec, default_registry
from coach_stream.core import ClosingContext, EventSink
from coach_stream.errors import CoachStreamError, ServiceUnavailableError
from coach_stream.transport import clients
from coach_stream.transport.clients import FIRST_OFFSET
from coach_stream.transport.names import consumer_group
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.writer import KafkaRecordProducer

log = logging.getLogger(__name__)

TELEMETRY_SCHEMA = "io.coachstream.TelemetryEvent"
STARTED = "started"
"""The event a sink publishes when its task starts (a restarted task publishes it again)."""

_Scalar = None | bool | int | float | str


@functools.cache
def _codec() -> SingleObjectCodec:
    registry = default_registry()
    return SingleObjectCodec(registry, registry.latest(TELEMETRY_SCHEMA))


def _scalar(value: object) -> _Scalar:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None  # as the JSON lines: unknown is null
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return str(value)


def encode_event(run_id: str, task: str, event: str, fields: Mapping[str, object]) -> bytes:
    """A ``TelemetryEvent`` in single-object encoding (nested values as JSON text)."""
    return _codec().encode(
        {
            "run_id": run_id,
            "task": task,
            "event": event,
            "time_ms": int(time.time() * 1000),
            "fields": {str(key): _scalar(value) for key, value in fields.items()},
        }
    )


def decode_event(data: bytes) -> tuple[str, dict[str, Any]]:
    """``(task, event)``, the event shaped like a JSON line (``event``, ``task``, ``time``, ...)."""
    record = _codec().decode(data)
    event: dict[str, Any] = {
        "event": record["event"],
        "task": record["task"],
        "time": record["time_ms"] / 1000,
    }
    event.update(record["fields"])
    return str(record["task"]), event


EXIT_FLUSH_S = 5.0
"""How long a task's exit waits for its last telemetry events to be acknowledged."""


class TelemetrySink(ClosingContext):
    """An ``EventSink`` that publishes to the run's telemetry topic (best effort).

    Events are few (one every few seconds per task), so each is sent at once
    (``linger.ms=0``) and nothing waits for its acknowledgement on the training path.
    """

    def __init__(self, settings: KafkaSettings, topics: RunTopics, run_id: str, task: str) -> None:
        self._producer = KafkaRecordProducer(settings, topics.telemetry, {"linger.ms": 0})
        self._run_id, self._task = run_id, task
        self._key = task.encode()
        self._warned = False

    def __call__(self, event: str, fields: Mapping[str, object]) -> None:
        try:
            self._producer.produce(self._key, encode_event(self._run_id, self._task, event, fields))
        except CoachStreamError as error:
            if not self._warned:  # once: the broker being down is reported by the real paths
                log.warning("telemetry event %r not published (%s); continuing", event, error)
                self._warned = True

    def close(self) -> None:
        # Best effort at exit too: a broker that refuses this client (a wrong password) or is
        # gone must not hold a task's exit for the delivery timeout (two minutes), past the
        # supervisor's grace; a healthy broker acknowledges the last events in milliseconds.
        try:
            self._producer.close(timeout=EXIT_FLUSH_S)
        except CoachStreamError as error:
            log.warning("telemetry events not all delivered at exit: %s", error)


def fan_out(*sinks: EventSink) -> EventSink:
    """One ``EventSink`` that reports every event to each of ``sinks`` in order."""

    def sink(event: str, fields: Mapping[str, object]) -> None:
        for each in sinks:
            each(event, fields)

    return sink


class TelemetryReader(ClosingContext):
    """Every telemetry event of a run, from the topic's beginning; nothing is committed."""

    def __init__(self, settings: KafkaSettings, topics: RunTopics, timeout_s: float = 10.0) -> None:
        self._settings, self._topic, self._timeout_s = settings, topics.telemetry, timeout_s
        self._consumer: Consumer | None = None
        self._position = 0
        self.undecodable = 0

    def _client(self) -> Consumer:
        if self._consumer is None:
            group = consumer_group("telemetry-reader", private=True)
            consumer = clients.consumer(self._settings, group)
            consumer.assign([TopicPartition(self._topic, 0, FIRST_OFFSET)])
            self._consumer = consumer
        return self._consumer

    def poll(self, timeout: float) -> list[tuple[str, dict[str, Any]]]:
        """Events that arrived since the last call, waiting up to ``timeout`` for the first."""
        consumer = self._client()
        first = consumer.poll(max(timeout, 0.0))
        if first is None:
            return []
        events: list[tuple[str, dict[str, Any]]] = []
        for message in [first, *consumer.consume(num_messages=500, timeout=0)]:
            error = message.error()
            if error is not None:
                if error.fatal():
                    raise ServiceUnavailableError(
                        f"reading {self._topic} failed ({error.str()}); check the broker at "
                        f"{self._settings.bootstrap_servers}."
                    )
                continue
            offset = message.offset()
            if offset is not None:
                self._position = max(self._position, offset + 1)
            try:
                events.append(decode_event(message.value() or b""))
            except CoachStreamError as exc:
                self.undecodable += 1
                log.warning("skipping undecodable telemetry record at %s: %s", offset, exc)
        return events

    def read_to_end(self, timeout: float) -> list[tuple[str, dict[str, Any]]]:
        """Every event up to the topic's end when called (``status``: one look)."""
        deadline = time.monotonic() + timeout
        try:
            _, end = clients.watermarks(
                self._client(), TopicPartition(self._topic, 0), self._timeout_s
            )
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise ServiceUnavailableError(
                    f"telemetry topic {self._topic} does not exist at "
                    f"{self._settings.bootstrap_servers}; check the run id and --kafka."
                ) from exc
            raise ServiceUnavailableError(
                f"Kafka at {self._settings.bootstrap_servers} did not answer for {self._topic} "
                f"({error.str()}); check --kafka and that the broker is up."
            ) from exc
        events = self.poll(0.0)
        while self._position < end:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ServiceUnavailableError(
                    f"read only {self._position} of {end} telemetry events within {timeout:g} s; "
                    f"check the broker at {self._settings.bootstrap_servers}."
                )
            events += self.poll(min(remaining, 0.2))
        return events

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class TelemetryLines:
    """A run's events as ``(task, JSON line)`` pairs, the shape its tasks print on stdout,
    so a follower written for log lines (``launcher.follow``) reads the topic unchanged.

    Each ``poll`` reads up to the topic's end as it is at the call: every event a task had
    delivered before (a trainer's ``finished`` is acknowledged before it exits) is in it.
    """

    def __init__(self, reader: TelemetryReader, timeout_s: float = 5.0) -> None:
        self.reader, self._timeout_s = reader, timeout_s

    def poll(self) -> list[tuple[str, str]]:
        events = self.reader.read_to_end(self._timeout_s)
        return [(task, json.dumps(event)) for task, event in events]

    def close(self) -> None:
        self.reader.close()
