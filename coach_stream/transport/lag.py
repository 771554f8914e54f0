"""What the broker knows about a run that no task reports: consumer lag and dead letters.

``status`` asks, at each refresh, for every partition of the experience topic its end
(high watermark) and the trainer group's committed offset, and, where records wait
unread, the timestamp of the oldest of them (so lag is shown in seconds as well as
records); and the size of the dead-letter topic. The trainer reads with ``assign`` and
commits its position while it reads, so a probe in its group (it only reads ``committed``
and fetches by offset, never commits or joins) disturbs nothing (``transport.backlog``
asks the same of the total, for the workers' rate limit). A trainer's own newer read
position (its "progress" events carry it) may be passed in: the lag is measured from
whichever of the two is further on.

Every failure becomes ``BrokerFigures.error``: the status view still shows telemetry.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from coach_stream.core import ClosingContext
from coach_stream.transport import clients
from coach_stream.transport.settings import KafkaSettings, RunTopics

_FETCH_S = 1.0  # at most this long per refresh fetching the oldest unread records


@dataclass(frozen=True)
class PartitionOffsets:
    """One experience partition: its end, the trainer group's committed offset, and the
    timestamp (epoch ms) of the oldest record not yet consumed (None when none waits)."""

    partition: int
    end: int
    committed: int | None
    position: int
    """Where the trainer is: the committed offset or its newer reported read position."""
    oldest_unread_ms: int | None = None

    @property
    def lag_records(self) -> int:
        return max(0, self.end - self.position)


@dataclass(frozen=True)
class BrokerFigures:
    partitions: tuple[PartitionOffsets, ...] = ()
    dead_letters: int | None = None
    """Records in the run's dead-letter topic (None: the topic does not exist yet)."""
    error: str | None = None


class BrokerProbe(ClosingContext):
    """``figures()`` asked of the broker; one consumer, kept between refreshes."""

    def __init__(self, settings: KafkaSettings, topics: RunTopics, group: str) -> None:
        self._settings, self._topics, self._group = settings, topics, group
        self._consumer: Consumer | None = None
        self._timeout = 5.0

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = clients.consumer(self._settings, self._group)
        return self._consumer

    def figures(self, reported: Mapping[int, int] | None = None) -> BrokerFigures:
        """The lag per partition and the dead-letter count now; ``reported``: the trainer's
        last reported read positions, used where they are ahead of the committed ones."""
        try:
            partitions = self._partitions(reported or {})
            return BrokerFigures(partitions, self._dead_letters())
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            return BrokerFigures(
                error=f"Kafka at {self._settings.bootstrap_servers} did not answer "
                f"({error.str()}); lag and dead letters are unknown."
            )

    def _topic_partitions(self, topic: str) -> list[int] | None:
        metadata = self._client().list_topics(topic, timeout=self._timeout)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            return None
        return sorted(found.partitions)

    def _partitions(self, reported: Mapping[int, int]) -> tuple[PartitionOffsets, ...]:
        topic, consumer = self._topics.experience, self._client()
        numbers = self._topic_partitions(topic)
        if numbers is None:
            return ()
        committed = {
            tp.partition: tp.offset
            for tp in consumer.committed(
                [TopicPartition(topic, p) for p in numbers], timeout=self._timeout
            )
            if tp.offset >= 0
        }
        rows = []
        for p in numbers:
            low, end = clients.watermarks(consumer, TopicPartition(topic, p), self._timeout)
            position = max(committed.get(p, low), reported.get(p, low), low)
            rows.append(PartitionOffsets(p, end, committed.get(p), min(position, end)))
        stamps = self._oldest_unread(topic, [r for r in rows if r.lag_records > 0])
        return tuple(
            PartitionOffsets(r.partition, r.end, r.committed, r.position, stamps.get(r.partition))
            for r in rows
        )

    def _oldest_unread(self, topic: str, waiting: list[PartitionOffsets]) -> dict[int, int]:
        """The timestamp of the record at each partition's position (bounded by _FETCH_S)."""
        if not waiting:
            return {}
        consumer = self._client()
        consumer.assign([TopicPartition(topic, r.partition, r.position) for r in waiting])
        stamps: dict[int, int] = {}
        deadline = time.monotonic() + _FETCH_S
        try:
            while len(stamps) < len(waiting) and (left := deadline - time.monotonic()) > 0:
                message = consumer.poll(left)
                if message is None or message.error() is not None:
                    continue
                partition = message.partition()
                _kind, stamp = message.timestamp()
                if partition is not None and partition not in stamps and stamp > 0:
                    stamps[partition] = stamp
        finally:
            consumer.unassign()
        return stamps

    def _dead_letters(self) -> int | None:
        topic = self._topics.dead_letter
        numbers = self._topic_partitions(topic)
        if numbers is None:
            return None
        total = 0
        for p in numbers:
            low, high = clients.watermarks(self._client(), TopicPartition(topic, p), self._timeout)
            total += high - low
        return total

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
