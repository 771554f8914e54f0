"""The trainer's backlog as the broker sees it: ``core.ExperienceBacklog`` over Kafka.

Unread records = the experience topic's ends (high watermarks) minus the offsets the
trainer's group has committed. The trainer reads with ``assign`` and never joins its
group, so asking the group's committed offsets from another consumer disturbs nothing;
the trainer's reader commits its position every fraction of a second while it reads
(``KafkaExperienceReader``), so the figure trails the truth by about that much. This is
the figure ``bench/soak.py`` reports as consumer lag, and what an ASYNC worker's rate limit
(``rollout/pacing.py``) keeps bounded.

A broker that does not answer makes the backlog unknown (None) rather than an error: the
worker's producer already stops delivering then, and the next question waits
``retry_after_s`` so a worker does not spend each share on a timed-out request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, TopicPartition

from coach_stream.core import ClosingContext
from coach_stream.transport import clients
from coach_stream.transport.settings import KafkaSettings, RunTopics

log = logging.getLogger(__name__)
_unanswered_log = clients.RateLimitedLog(log, prefix="")


class KafkaExperienceBacklog(ClosingContext):
    """``unread()``: records of the run's experience topic the trainer has not read yet."""

    def __init__(
        self,
        settings: KafkaSettings,
        topics: RunTopics,
        group: str,
        *,
        timeout: float = 2.0,
        retry_after_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings, self._topic, self._group = settings, topics.experience, group
        self._timeout, self._retry_after_s, self._clock = timeout, retry_after_s, clock
        self._consumer: Consumer | None = None  # no I/O before the first question
        self._partitions: list[int] = []
        self._quiet_until = 0.0

    def unread(self) -> int | None:
        """Sum over partitions of (end - committed); None while nothing is committed, or
        when the broker did not answer (then None again for ``retry_after_s``)."""
        if self._clock() < self._quiet_until:
            return None
        try:
            return self._ask()
        except KafkaException as exc:
            self._quiet_until = self._clock() + self._retry_after_s
            _unanswered_log.emit(
                logging.WARNING,
                f"the trainer's backlog on {self._topic} is unknown (Kafka at "
                f"{self._settings.bootstrap_servers}: {exc.args[0]}); the rate limit lets "
                f"writes through until it answers",
            )
            return None

    def _ask(self) -> int | None:
        consumer = self._client()
        if not self._partitions:
            metadata = consumer.list_topics(self._topic, timeout=self._timeout)
            found = metadata.topics.get(self._topic)
            if found is None or found.error is not None or not found.partitions:
                return None  # not created yet: nothing written, nothing to limit
            self._partitions = sorted(found.partitions)
        wanted = [TopicPartition(self._topic, p) for p in self._partitions]
        committed = consumer.committed(wanted, timeout=self._timeout)
        if all(tp.offset < 0 for tp in committed):
            return None  # the trainer has recorded no position yet
        total = 0
        for tp in committed:
            _low, end = clients.watermarks(
                consumer, TopicPartition(self._topic, tp.partition), self._timeout
            )
            total += max(0, end - max(tp.offset, 0))
        return total

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = clients.consumer(self._settings, self._group)
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
