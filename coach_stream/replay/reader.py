"""The replay reader: a topic range in, columnar batches out, streaming and deterministic.

Every replay tool (``inspect``, ``export``, offline ``train``, notebooks) reads through
``ReplayReader``. It reads a bounded offset/time range of a run's experience topic with its
own consumer: partitions one after the other, each in offset order, so the same range
always yields the same records in the same order (Kafka interleaves partitions as fetches
happen to return; offline training must not inherit that). It holds one batch at a time:
records are decoded into columns (``replay.decode``), concatenated column by column into a
``TransitionBatch`` and released, so memory is bounded by the batch, never by the topic.

Records that do not decode (garbage, an unknown schema fingerprint) are counted and
skipped; the reader is read-only, it never dead-letters (the trainer already did).
Older schema versions decode through the registry's fingerprints (schema resolution);
pass a registry that holds newer schemas to read topics written by a newer release.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Self

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from coach_stream.codec import ChunkCodec, SchemaRegistry, default_registry
from coach_stream.codec.columnar import ColumnarDecoder
from coach_stream.core import ClosingContext
from coach_stream.errors import ConfigError, ServiceUnavailableError
from coach_stream.replay.batches import (
    ChunkBatch,
    TransitionBatch,
    Undecodable,
    take_batch,
    to_transitions,
)
from coach_stream.replay.decode import Layout, ReaderStats, decode_records
from coach_stream.replay.range import EARLIEST, LATEST, Bound, parse_bound
from coach_stream.replay.spans import PartitionSpan, resolve_spans
from coach_stream.transport import clients
from coach_stream.transport.admin import closed_on_failure, refuse_at_once
from coach_stream.transport.environment import kafka_settings
from coach_stream.transport.names import RunTopics, consumer_group, is_run_topic
from coach_stream.transport.settings import KafkaSettings

__all__ = [
    "ChunkBatch",
    "PartitionSpan",
    "ReaderStats",
    "ReplayReader",
    "TransitionBatch",
    "Undecodable",
    "open",
    "resolve_topic",
    "to_transitions",
]

log = logging.getLogger(__name__)

_CONSUME = 10_000  # records per consume() call: amortizes the per-call cost of librdkafka
_CONSUME_BYTES = 32 * 1024 * 1024  # ...but not more bytes than this per call
# ...nor more than this many batches' records. The columnar decoder's cost is mostly per
# numpy call, so it pays to give it more records at once: topic -> batches of CartPole
# chunks read 162 MB per CPU-second with 4 batches' records per call (8,192 records)
# against 142 with 1 (2,049), medians of 8 interleaved passes on one topic. Memory stays
# O(batch), not O(topic): exporting 105 MiB peaked at 15 MiB traced, against 5.5 before.
_BATCHES_PER_CONSUME = 4
# librdkafka prefetches up to this much per consumer; bounded so that replaying a topic far
# larger than RAM keeps a flat footprint (the trainer's reader allows 256 MiB).
_PREFETCH_KB = 65_536
# A stored range needs no long poll: with the trainer's 50 ms, the fetch still parked at the
# broker for the partition just finished held up the next partition's first fetch by 50 ms.
_FETCH_WAIT_MS = 5


class ReplayReader(ClosingContext):
    """A bounded range of one experience topic, read once, in a deterministic order.

    ``with ReplayReader(settings, topic) as reader: for batch in reader.batches(): ...``.
    ``spans`` (after ``open``) says what the range covers; ``stats`` what was read.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        *,
        start: Bound = EARLIEST,
        end: Bound = LATEST,
        registry: SchemaRegistry | None = None,
        batch_transitions: int = 65_536,
        timeout: float = 10.0,
        on_records: Callable[[int], None] | None = None,
    ) -> None:
        """``batch_transitions``: a batch is cut at the first chunk boundary at or past it.
        ``on_records(n)`` is called after each ``n`` records read (progress bars)."""
        if batch_transitions < 1:
            raise ConfigError(f"batch_transitions is {batch_transitions}; use at least 1.")
        self.settings, self.topic = settings, topic
        self.start, self.end = start, end
        self.registry = registry or default_registry()
        self.codec = ChunkCodec(self.registry)
        self.batch_transitions = batch_transitions
        self.timeout = timeout
        self.on_records = on_records
        self.stats = ReaderStats()
        self.spans: list[PartitionSpan] = []
        self._consumer: Consumer | None = None
        # records per consume(): small until the records' size is known, then about a batch
        self._consume_count = 64
        self._steps_per_record = 0  # running estimate (0: not known yet)
        self._layout: Layout | None = None  # the range's first chunk's: every batch's
        self._columnar = ColumnarDecoder()  # keeps the Tensor layout from read to read

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> Self:
        """Connect and resolve the range into per-partition offsets (``__enter__`` calls it)."""
        if self._consumer is not None:
            return self
        refuse_at_once(self.settings, self.timeout)
        # a private group: the replay commits nothing and must not share a group's state
        consumer = clients.consumer(
            self.settings,
            consumer_group("replay", private=True),
            **{
                "enable.partition.eof": True,
                "queued.max.messages.kbytes": _PREFETCH_KB,
                "fetch.wait.max.ms": _FETCH_WAIT_MS,
            },
        )
        with closed_on_failure(consumer, self.settings, self.timeout):
            self.spans = resolve_spans(
                consumer,
                self.topic,
                self.start,
                self.end,
                self.timeout,
                self.settings.bootstrap_servers,
            )
        self._consumer = consumer
        return self

    def __enter__(self) -> Self:
        return self.open()

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _client(self) -> Consumer:
        if self._consumer is None:
            raise RuntimeError("ReplayReader used outside `with` (call open() first)")
        return self._consumer

    @property
    def total_records(self) -> int:
        """Records the range covers (for progress bars)."""
        return sum(s.records for s in self.spans)

    # ------------------------------------------------------------------ reading

    def messages(self) -> Iterator[list[Message]]:
        """The range's records in lists of at most ``_CONSUME``: partition by partition."""
        consumer = self._client()
        for span in self.spans:
            if span.records == 0:
                continue
            consumer.assign([TopicPartition(self.topic, span.partition, span.start)])
            next_offset, last_progress = span.start, time.monotonic()
            while next_offset < span.end:
                # never more than the range still holds: consume() returns once it has that
                # many, instead of waiting out its timeout for records past the range's end
                wanted = min(self._consume_count, span.end - next_offset)
                batch = consumer.consume(wanted, 0.05)
                kept, next_offset = self._in_span(batch, span, next_offset)
                if batch:
                    last_progress = time.monotonic()
                elif time.monotonic() - last_progress > self.timeout:
                    raise ServiceUnavailableError(
                        f"Reading {self.topic}[{span.partition}] stalled at offset "
                        f"{next_offset} before {span.end} for {self.timeout:g}s; check the "
                        f"broker at {self.settings.bootstrap_servers}."
                    )
                if kept:
                    self._read(kept)
                    yield kept
            consumer.unassign()

    def _in_span(
        self, batch: list[Message], span: PartitionSpan, next_offset: int
    ) -> tuple[list[Message], int]:
        """The records of ``batch`` inside ``span``, and the next offset still to read."""
        if batch and not any(map(Message.error, batch)):
            # the usual case, records only: one partition's offsets only grow, so the last
            # one tells whether every record is inside the span
            last = batch[-1].offset()
            if last is not None and last < span.end:
                return batch, last + 1
        kept: list[Message] = []
        for message in batch:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    # the end offset was computed from the watermark: reaching the
                    # log's end means every record of the range has been seen
                    next_offset = max(next_offset, int(message.offset() or 0))
                    if next_offset >= span.end or message.offset() is None:
                        next_offset = span.end
                    continue
                self._on_error(error)
                continue
            offset = message.offset()
            if offset is None or offset >= span.end:
                next_offset = span.end
                continue
            next_offset = offset + 1
            kept.append(message)
        return kept, next_offset

    def _read(self, kept: list[Message]) -> None:
        """Count ``kept`` and size the next consume() by what the records hold."""
        # about _CONSUME_BYTES per call: big records (images) come fewer at a time
        size = sum(map(len, kept)) / len(kept)
        if self._steps_per_record:
            records = _BATCHES_PER_CONSUME * self.batch_transitions // self._steps_per_record
            self._consume_count = int(min(_CONSUME, records + 1, max(16, _CONSUME_BYTES // size)))
        self.stats.records += len(kept)
        if self.on_records is not None:
            self.on_records(len(kept))

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal() or error.code() in (
            KafkaError.UNKNOWN_TOPIC_OR_PART,
            KafkaError.OFFSET_OUT_OF_RANGE,
        ):
            raise ServiceUnavailableError(
                f"Reading {self.topic} failed ({error.str()}); check the broker at "
                f"{self.settings.bootstrap_servers} and that the topic still exists."
            )
        log.warning("transient consumer error on %s: %s", self.topic, error.str())

    def chunk_batches(self) -> Iterator[ChunkBatch]:
        """Decoded chunks, cut at the first chunk boundary at or past ``batch_transitions``.

        The cut depends only on the records, never on how many a fetch returned, so the
        same range gives the same batches.
        """
        pending: list[ChunkBatch] = []
        held = 0
        for messages in self.messages():
            decoded = decode_records(messages, self.codec, self.stats, self._layout, self._columnar)
            if decoded is None:
                continue
            if self._layout is None and len(decoded):
                columns = decoded.columns
                self._layout = Layout.of(columns.observations, columns.actions)
            pending.append(decoded)
            held += decoded.transitions
            if len(decoded):
                self._steps_per_record = max(1, decoded.transitions // len(decoded))
            while held >= self.batch_transitions:
                head, pending = take_batch(pending, self.batch_transitions)
                held -= head.transitions
                yield self._count(head)
        if pending:
            last = ChunkBatch.join(pending)
            if len(last) or last.undecodable:
                yield self._count(last)

    def _count(self, batch: ChunkBatch) -> ChunkBatch:
        stats = self.stats
        stats.chunks += len(batch)
        stats.transitions += batch.transitions
        stats.max_held_records = max(stats.max_held_records, len(batch) + len(batch.undecodable))
        return batch

    def batches(self) -> Iterator[TransitionBatch]:
        """The range as columnar transition batches (what learners and exports consume)."""
        for batch in self.chunk_batches():
            if len(batch):
                yield to_transitions(batch)


def open(
    run_id: str | None = None,
    *,
    topic: str | None = None,
    kafka: str | None = None,
    settings: KafkaSettings | None = None,
    start: str | None = None,
    end: str | None = None,
    batch_transitions: int = 65_536,
    registry: SchemaRegistry | None = None,
) -> ReplayReader:
    """A reader of ``run_id``'s experience topic (or ``topic``), opened; use it in ``with``.

    ``settings`` says how to reach Kafka; without it, ``kafka`` (default
    ``KAFKA_BOOTSTRAP_SERVERS``) and the ``COACH_STREAM_KAFKA_*`` security variables do, as
    for the CLI (``transport.environment``). ``start``/``end`` take the ``--from``/``--to``
    forms (``replay.range``).
    """
    if settings is None:
        servers = kafka or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not servers:
            raise ConfigError(
                "No Kafka address; pass kafka='HOST:PORT' or export KAFKA_BOOTSTRAP_SERVERS."
            )
        settings = kafka_settings(servers)
    reader = ReplayReader(
        settings,
        resolve_topic(run_id or topic or ""),
        start=parse_bound(start, "--from"),
        end=parse_bound(end, "--to"),
        registry=registry,
        batch_transitions=batch_transitions,
    )
    return reader.open()


def resolve_topic(run_or_topic: str) -> str:
    """A run id's experience topic, or the topic itself when given a full topic name."""
    if not run_or_topic:
        raise ConfigError("Name a run id or an experience topic to replay.")
    if is_run_topic(run_or_topic):
        return run_or_topic
    return RunTopics.for_run(run_or_topic).experience
