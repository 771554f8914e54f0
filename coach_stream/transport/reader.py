"""The Kafka experience reader: decoded chunks in batches, with positions for checkpoints.

The reader assigns itself every partition of the run's experience topic, or with ``share``
(rank, K) a data-parallel trainer rank's part of them (``own_partitions``: every K-th,
assigned, not balanced by a consumer-group rebalance: see docs/decisions.md), so its
place in the log is exactly ``positions()``: the trainer stores them in its
checkpoint and ``seek``s back to them on restart; ``commit`` only informs lag tools.
While it reads, the reader also commits its position by itself (asynchronously, at most
every ``commit_every_s``), so lag tools and the rollout workers' rate limit
(``transport/backlog.py``) see where the trainer is, not where it was at its last version.
A record that cannot be decoded, or (given a ``ChunkSpec``) decodes but does not fit the
run, is copied, untouched, to ``<run>.dead-letter`` with headers naming the error and where
it came from, counted, and skipped: one bad producer never stops training. ``read``
returns only once those copies are acknowledged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal, Self

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from coach_stream.codec import ChunkSpec, decode_chunk
from coach_stream.core import ClosingContext, ExperienceChunk, Positions
from coach_stream.errors import (
    ConfigError,
    DecodeError,
    InvalidChunkError,
    ServiceUnavailableError,
)
from coach_stream.transport import clients
from coach_stream.transport.admin import closed_on_failure, unreachable
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.writer import KafkaRecordProducer

log = logging.getLogger(__name__)
# A producer gone wrong can send thousands of bad records: one line per kind of reason
# (digits aside) every 30 s, with the count held back; the stats count every one.
_dead_letter_log = clients.RateLimitedLog(log, prefix="")

Start = Literal["earliest", "committed"]


def own_partitions(partitions: Iterable[int], rank: int, world: int) -> list[int]:
    """Trainer rank ``rank``'s share of a topic's partitions: every ``world``-th, from ``rank``."""
    return [p for p in sorted(partitions) if p % world == rank]


@dataclass
class ReadCounts:
    """What every reader of an experience topic counts (this one and ``replay``'s)."""

    records: int = 0
    """Records consumed, chunks or not."""
    chunks: int = 0
    """Chunks returned."""
    bytes: int = 0
    """Value bytes consumed."""


@dataclass
class ReaderStats(ReadCounts):
    """``ReadCounts`` and the records dead-lettered.

    ``dead_lettered`` counts both kinds of bad record; ``invalid`` the subset that decoded
    but did not fit the run's ``ChunkSpec``.
    """

    dead_lettered: int = 0
    invalid: int = 0


class KafkaExperienceReader(ClosingContext):
    """``core.ExperienceReader`` over the run's experience topic."""

    def __init__(
        self,
        settings: KafkaSettings,
        topics: RunTopics,
        group_id: str,
        *,
        start: Start = "earliest",
        decode: Callable[[bytes], ExperienceChunk] = decode_chunk,
        spec: ChunkSpec | None = None,
        timeout: float = 10.0,
        commit_every_s: float | None = 0.25,
        share: tuple[int, int] = (0, 1),
    ) -> None:
        """``spec``: what the run's chunks look like; the trainer passes it, so a chunk that
        decodes but would crash its learner is dead-lettered instead (None: decode only).
        ``commit_every_s``: how often ``read`` commits a moved position (None: never; only
        ``commit()`` does). ``share``: (rank, K) of a data-parallel trainer: read only
        ``own_partitions``."""
        self.settings = settings
        self.share = share
        self._topic_partitions: list[int] = []
        self.topics = topics
        self.group_id = group_id
        self.stats = ReaderStats()
        self._start = start
        self._decode = decode
        self._spec = spec
        self._timeout = timeout
        self._consumer: Consumer | None = None
        self._dead_letter = KafkaRecordProducer(settings, topics.dead_letter)
        self._next: dict[int, int] = {}
        self._commit_every_s = commit_every_s
        self._committed: dict[int, int] = {}  # what the last commit recorded
        self._committed_at = 0.0

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Connect and assign every partition (``__enter__`` calls it)."""
        if self._consumer is not None:
            return
        consumer = clients.consumer(self.settings, self.group_id)
        topic = self.topics.experience
        with closed_on_failure(consumer, self.settings, self._timeout):
            metadata = consumer.list_topics(topic, timeout=self._timeout)
            found = metadata.topics.get(topic)
            if found is None or found.error is not None or not found.partitions:
                raise ConfigError(
                    f"Topic {topic} does not exist on {self.settings.bootstrap_servers}; "
                    "create the run's topics first (ensure_run_topics, done by `coach-stream "
                    "launch`) or check the run id."
                )
            self._topic_partitions = sorted(found.partitions)
            rank, world = self.share
            if world > len(self._topic_partitions):
                raise ConfigError(
                    f"{world} trainer ranks cannot share the {len(self._topic_partitions)} "
                    f"partitions of {topic}: a rank would read nothing; use --trainers "
                    f"{len(self._topic_partitions)} or fewer (or more --workers)."
                )
            partitions = own_partitions(self._topic_partitions, rank, world)
            self._next = dict.fromkeys(partitions, 0)
            if self._start == "committed":
                committed = consumer.committed(
                    [TopicPartition(topic, p) for p in partitions], timeout=self._timeout
                )
                for tp in committed:
                    if tp.offset >= 0:
                        self._next[tp.partition] = tp.offset
        self._consumer = consumer
        self._assign()

    def close(self) -> None:
        try:
            self._dead_letter.close()
        finally:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None

    def __enter__(self) -> Self:
        self.open()
        return self

    def _client(self) -> Consumer:
        if self._consumer is None:
            raise RuntimeError("KafkaExperienceReader used outside `with` (call open() first)")
        return self._consumer

    def _assign(self) -> None:
        topic = self.topics.experience
        self._client().assign([TopicPartition(topic, p, o) for p, o in self._next.items()])

    # ------------------------------------------------------------------ reading

    def read(self, max_chunks: int, timeout: float) -> list[ExperienceChunk]:
        """Up to ``max_chunks`` decoded chunks, waiting at most ``timeout`` for the first."""
        chunks = self._read(max_chunks, timeout)
        self._commit_if_due()
        return chunks

    def _read(self, max_chunks: int, timeout: float) -> list[ExperienceChunk]:
        consumer = self._client()
        messages = consumer.consume(max_chunks, 0)
        if not messages:
            first = consumer.poll(timeout)
            if first is None:
                return []
            messages = [first]
            if max_chunks > 1:
                messages += consumer.consume(max_chunks - 1, 0)
        chunks: list[ExperienceChunk] = []
        decode, spec = self._decode, self._spec
        dead = 0
        for message in messages:
            error = message.error()
            if error is not None:
                self._on_error(error)
                continue
            partition, offset, value = message.partition(), message.offset(), message.value()
            if partition is None or offset is None:  # librdkafka sets both on a fetched record
                raise ServiceUnavailableError(
                    f"Kafka returned a record of {self.topics.experience} without a partition "
                    "or offset; check the broker and the confluent-kafka version."
                )
            self._next[partition] = offset + 1
            try:
                if value is None:
                    raise DecodeError("Record has no value (a tombstone).")
                chunk = decode(value)
                if spec is not None:
                    spec.check(chunk)
                chunks.append(chunk)
            except DecodeError as exc:
                self._send_to_dead_letter(message, exc)
                dead += 1
            else:
                self.stats.bytes += len(value)
        self.stats.records += len(messages)
        self.stats.chunks += len(chunks)
        if dead:
            self._dead_letter.flush(self.settings.delivery_timeout_ms / 1000 + 5)
        return chunks

    def _on_error(self, error: KafkaError) -> None:
        if error.code() == KafkaError._PARTITION_EOF:
            return
        if error.fatal() or error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise ServiceUnavailableError(
                f"Reading {self.topics.experience} failed ({error.str()}); check the broker at "
                f"{self.settings.bootstrap_servers} and that the run's topics exist."
            )
        log.warning("transient consumer error on %s: %s", self.topics.experience, error.str())

    @property
    def dead_lettered(self) -> int:
        """Records set aside so far (undecodable or not fitting the run), never returned."""
        return self.stats.dead_lettered

    def _send_to_dead_letter(self, message: Message, error: DecodeError) -> None:
        invalid = isinstance(error, InvalidChunkError)
        self.stats.dead_lettered += 1
        self.stats.invalid += invalid
        reason = str(error)
        # One line per kind of fault and topic every 30 s (with how many were held back):
        # a flood of hostile records must not flood the log too. Each record's reason is
        # in its dead-letter copy's headers.
        _dead_letter_log.emit(
            logging.WARNING,
            f"dead-lettering {message.topic()}[{message.partition()}]@{message.offset()}: {reason}",
            key=f"{message.topic()} {type(error).__name__} {invalid}",
        )
        self._dead_letter.produce(
            message.key(),
            message.value() or b"",
            headers=[
                ("error", reason),
                ("error.kind", "invalid" if invalid else "undecodable"),
                ("source.topic", message.topic() or ""),
                ("source.partition", str(message.partition())),
                ("source.offset", str(message.offset())),
            ],
        )

    # ------------------------------------------------------------------ positions

    def positions(self) -> Positions:
        return dict(self._next)

    def seek(self, positions: Mapping[int, int]) -> None:
        """Move to ``positions``; those of partitions another trainer rank reads are skipped."""
        unknown = sorted(set(positions) - set(self._topic_partitions))
        if unknown:
            raise ConfigError(
                f"Cannot seek {self.topics.experience} to partitions {unknown}: it has "
                f"{len(self._topic_partitions)}; the positions belong to another topic or run."
            )
        self._next.update({p: int(o) for p, o in positions.items() if p in self._next})
        self._assign()

    def commit(self) -> None:
        topic = self.topics.experience
        offsets = [TopicPartition(topic, p, o) for p, o in self._next.items()]
        try:
            self._client().commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            raise unreachable(self.settings, self._timeout, exc.args[0]) from exc
        self._committed, self._committed_at = dict(self._next), time.monotonic()

    def _commit_if_due(self) -> None:
        """Commit a moved position without waiting, at most every ``commit_every_s``.

        Best effort: an asynchronous commit that fails is not reported (the next one, or
        the trainer's synchronous ``commit()`` at its next version, records the position).
        """
        if self._commit_every_s is None or self._next == self._committed:
            return
        now = time.monotonic()
        if now - self._committed_at < self._commit_every_s:
            return
        topic = self.topics.experience
        offsets = [TopicPartition(topic, p, o) for p, o in self._next.items()]
        try:
            self._client().commit(offsets=offsets, asynchronous=True)
        except KafkaException as exc:  # queued requests rarely fail at once; say so, go on
            log.warning("could not commit the position of %s: %s", topic, exc.args[0])
            return
        self._committed, self._committed_at = dict(self._next), now

    def cached_lag(self) -> Positions:
        """Records not read yet per partition, against the ends the latest fetches reported
        (no request to the broker: cheap enough for every progress event, which carries it
        to ``/metrics``); a partition no fetch has reported on yet is left out."""
        consumer, topic = self._client(), self.topics.experience
        lag: Positions = {}
        for partition, position in self._next.items():
            ends = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            if ends is not None and ends[1] >= 0:
                lag[partition] = max(0, int(ends[1]) - position)
        return lag

    def end_offsets(self) -> Positions:
        """The current end (high watermark) of every partition."""
        consumer, topic = self._client(), self.topics.experience
        try:
            return {
                p: clients.watermarks(consumer, TopicPartition(topic, p), self._timeout)[1]
                for p in self._next
            }
        except KafkaException as exc:
            raise unreachable(self.settings, self._timeout, exc.args[0]) from exc

    def at_end(self) -> bool:
        """Whether every record written so far has been read."""
        return all(self._next[p] >= end for p, end in self.end_offsets().items())

    def read_until_end(
        self, max_chunks: int, timeout: float = 10.0
    ) -> Iterator[list[ExperienceChunk]]:
        """Batches until the end offsets seen at the call (for replay tools and tests).

        Raises ServiceUnavailableError if no record arrives for ``timeout`` seconds.
        """
        end = self.end_offsets()
        last_progress = time.monotonic()
        while any(self._next[p] < e for p, e in end.items()):
            before = self.stats.records
            batch = self.read(max_chunks, min(timeout, 0.5))
            if self.stats.records != before:
                last_progress = time.monotonic()
                if batch:
                    yield batch
            elif time.monotonic() - last_progress > timeout:
                raise ServiceUnavailableError(
                    f"Reading {self.topics.experience} stalled at {self.positions()} before "
                    f"the end {end} for {timeout:g}s; check the broker at "
                    f"{self.settings.bootstrap_servers}."
                )
