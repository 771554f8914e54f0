"""The replay reader: a topic range in, columnar batches out, streaming and deterministic.

Every replay tool (``inspect``, ``export``, offline ``train``, notebooks) reads through
``ReplayReader``. It reads a bounded offset/time range of a run's experience topic with its
own consumer: partitions one after the other, each in offset order, so the same range
always yields the same records in the same order (Kafka interleaves partitions as fetches
happen to return; offline training must not inherit that). It holds one batch at a time:
records are decoded as zero-copy views (``codec``), concatenated column by column into a
``TransitionBatch`` and released, so memory is bounded by the batch, never by the topic.

Records that do not decode (garbage, an unknown schema fingerprint) are counted and
skipped; the reader is read-only, it never dead-letters (the trainer already did).
Older schema versions decode through the registry's fingerprints (schema resolution);
pass a registry that holds newer schemas to read topics written by a newer release.
"""

from __future__ import annotations

import builtins
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np
import numpy.typing as npt
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from coach_stream.codec import ChunkCodec, SchemaRegistry, default_registry
from coach_stream.codec.avro import HEADER_SIZE
from coach_stream.codec.columnar import decode_columns
from coach_stream.codec.columns import (
    ChunkColumns,
    concat_columns,
    empty_columns,
    from_chunks,
    split_columns,
)
from coach_stream.codec.fastpath import V1_FINGERPRINT
from coach_stream.core import ClosingContext, ExperienceChunk
from coach_stream.errors import ConfigError, DecodeError, ServiceUnavailableError
from coach_stream.replay.range import EARLIEST, LATEST, Bound
from coach_stream.transport import clients
from coach_stream.transport.admin import unreachable
from coach_stream.transport.settings import KafkaSettings

log = logging.getLogger(__name__)

_CONSUME = 10_000  # records per consume() call: amortizes the per-call cost of librdkafka
_CONSUME_BYTES = 32 * 1024 * 1024  # ...but not more bytes than this per call
# librdkafka prefetches up to this much per consumer; bounded so that replaying a topic far
# larger than RAM keeps a flat footprint (the trainer's reader allows 256 MiB).
_PREFETCH_KB = 65_536
# A stored range needs no long poll: with the trainer's 50 ms, the fetch still parked at the
# broker for the partition just finished held up the next partition's first fetch by 50 ms.
_FETCH_WAIT_MS = 5


@dataclass(frozen=True)
class PartitionSpan:
    """One partition's records in the range: ``[start, end)``, and what the topic holds."""

    partition: int
    start: int
    end: int
    low: int
    """The first offset still stored (retention deletes from the front)."""
    high: int
    """One past the last offset written."""

    @property
    def records(self) -> int:
        return max(0, self.end - self.start)


@dataclass
class ReaderStats:
    """What one pass read: records, chunks, transitions, undecodable records, bytes."""

    records: int = 0
    chunks: int = 0
    transitions: int = 0
    undecodable: int = 0
    bytes: int = 0
    schemas: Counter[builtins.bytes] = field(default_factory=Counter)
    """Chunks per writer-schema fingerprint."""
    max_held_records: int = 0
    """The most records the reader held at once (bounded by a batch; tests check it)."""


@dataclass(frozen=True)
class Undecodable:
    """A record of the range that is not a chunk: where it is and why."""

    partition: int
    offset: int
    reason: str


@dataclass(frozen=True)
class ChunkBatch:
    """Decoded chunks in read order (``columns``), with where each came from.

    ``partitions``/``offsets``/``timestamps_ms``/``fingerprints``/``values`` are per chunk,
    parallel to ``columns``; ``undecodable`` lists the range's records that are not chunks.
    """

    columns: ChunkColumns
    partitions: npt.NDArray[np.int32]
    offsets: npt.NDArray[np.int64]
    timestamps_ms: npt.NDArray[np.int64]
    fingerprints: list[bytes]
    values: list[bytes]
    """The records' raw values (single-object Avro), for exports that copy them as-is."""
    undecodable: list[Undecodable]

    def __len__(self) -> int:
        return len(self.columns)

    @property
    def transitions(self) -> int:
        return int(self.columns.steps.sum())

    def split(self, chunks: int) -> tuple[ChunkBatch, ChunkBatch]:
        """The first ``chunks`` chunks, and the rest (undecodable records go with the first)."""
        head, tail = split_columns(self.columns, chunks)
        return (
            ChunkBatch(
                head,
                self.partitions[:chunks],
                self.offsets[:chunks],
                self.timestamps_ms[:chunks],
                self.fingerprints[:chunks],
                self.values[:chunks],
                self.undecodable,
            ),
            ChunkBatch(
                tail,
                self.partitions[chunks:],
                self.offsets[chunks:],
                self.timestamps_ms[chunks:],
                self.fingerprints[chunks:],
                self.values[chunks:],
                [],
            ),
        )

    @staticmethod
    def join(parts: list[ChunkBatch]) -> ChunkBatch:
        if len(parts) == 1:
            return parts[0]
        return ChunkBatch(
            concat_columns([p.columns for p in parts]),
            np.concatenate([p.partitions for p in parts]),
            np.concatenate([p.offsets for p in parts]),
            np.concatenate([p.timestamps_ms for p in parts]),
            [f for p in parts for f in p.fingerprints],
            [v for p in parts for v in p.values],
            [u for p in parts for u in p.undecodable],
        )


@dataclass(frozen=True)
class TransitionBatch:
    """One row per transition, in read order: the columns a learner or an export needs.

    ``observations[i]`` is the observation ``actions[i]`` was taken in and
    ``next_observations[i]`` the one after it (the terminal one when ``terminated[i]``).
    Per-chunk fields are repeated on each of the chunk's rows; ``step`` is the index in
    the episode; ``episode_return``/``episode_length`` are set (not NaN/-1) on the row of
    the chunk that ends an episode. ``log_probs``/``values`` are None when no chunk of the
    batch carries them (NaN on the rows of those that do not).
    """

    observations: npt.NDArray[Any]
    next_observations: npt.NDArray[Any]
    actions: npt.NDArray[Any]
    rewards: npt.NDArray[np.float32]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    policy_version: npt.NDArray[np.int64]
    worker_id: npt.NDArray[np.int32]
    env_index: npt.NDArray[np.int32]
    chunk_seq: npt.NDArray[np.int64]
    step: npt.NDArray[np.int64]
    partition: npt.NDArray[np.int32]
    offset: npt.NDArray[np.int64]
    timestamp_ms: npt.NDArray[np.int64]
    episode_return: npt.NDArray[np.float64]
    episode_length: npt.NDArray[np.int64]
    log_probs: npt.NDArray[np.float32] | None
    values: npt.NDArray[np.float32] | None

    def __len__(self) -> int:
        return int(self.rewards.shape[0])


def to_transitions(batch: ChunkBatch) -> TransitionBatch:
    """The chunks of ``batch`` as transition rows (a few vectorized numpy calls per column)."""
    c = batch.columns
    steps = c.steps
    # each chunk has T+1 observation rows: row t is step t's, row t+1 the next one's
    ends = np.cumsum(steps + 1)
    not_last = np.ones(len(c.observations), dtype=np.bool_)
    not_last[ends - 1] = False
    not_first = np.ones(len(c.observations), dtype=np.bool_)
    not_first[ends - steps - 1] = False
    total = int(steps.sum())
    chunk_start = np.cumsum(steps) - steps
    step = np.arange(total, dtype=np.int64) - np.repeat(chunk_start - c.first_step, steps)
    ended = steps > 0
    last_rows = (np.cumsum(steps) - 1)[ended]
    episode_return = np.full(total, np.nan)
    episode_return[last_rows] = c.episode_return[ended]
    episode_length = np.full(total, -1, dtype=np.int64)
    episode_length[last_rows] = c.episode_length[ended]
    return TransitionBatch(
        observations=c.observations[not_last],
        next_observations=c.observations[not_first],
        actions=c.actions,
        rewards=c.rewards,
        terminated=c.terminated,
        truncated=c.truncated,
        policy_version=np.repeat(c.policy_version, steps),
        worker_id=np.repeat(c.worker_id, steps),
        env_index=np.repeat(c.env_index, steps),
        chunk_seq=np.repeat(c.chunk_seq, steps),
        step=step,
        partition=np.repeat(batch.partitions, steps),
        offset=np.repeat(batch.offsets, steps),
        timestamp_ms=np.repeat(batch.timestamps_ms, steps),
        episode_return=episode_return,
        episode_length=episode_length,
        log_probs=c.log_probs,
        values=c.values,
    )


_EMPTY = empty_columns()


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

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> Self:
        """Connect and resolve the range into per-partition offsets (``__enter__`` calls it)."""
        if self._consumer is not None:
            return self
        # a fresh group id: the replay commits nothing and must not share a group's state
        group = f"{self.settings.topic_prefix}.replay.{uuid.uuid4().hex[:12]}"
        consumer = clients.consumer(
            self.settings,
            group,
            **{
                "enable.partition.eof": True,
                "queued.max.messages.kbytes": _PREFETCH_KB,
                "fetch.wait.max.ms": _FETCH_WAIT_MS,
            },
        )
        try:
            self.spans = self._resolve(consumer)
        except KafkaException as exc:
            consumer.close()
            raise unreachable(self.settings, self.timeout, exc.args[0]) from exc
        except BaseException:
            consumer.close()
            raise
        self._consumer = consumer
        return self

    def __enter__(self) -> Self:
        return self.open()

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _resolve(self, consumer: Consumer) -> list[PartitionSpan]:
        # not assigned yet: a refused login surfaces at once (clients.metadata)
        metadata = clients.metadata(consumer, self.timeout, self.topic)
        found = metadata.topics.get(self.topic)
        if found is None or found.error is not None or not found.partitions:
            raise ConfigError(
                f"Topic {self.topic} does not exist on {self.settings.bootstrap_servers}; "
                "check the run id (`coach-stream status`) or the topic name."
            )
        partitions = sorted(found.partitions)
        for bound, option in ((self.start, "--from"), (self.end, "--to")):
            unknown = sorted(set(bound.offsets) - set(partitions))
            if unknown:
                raise ConfigError(
                    f"{option} {bound.text!r} names partitions {unknown}, but {self.topic} has "
                    f"partitions {partitions}; use partitions that exist."
                )
        marks = {
            p: clients.watermarks(consumer, TopicPartition(self.topic, p), self.timeout)
            for p in partitions
        }
        starts = self._offsets(consumer, self.start, marks, is_end=False)
        ends = self._offsets(consumer, self.end, marks, is_end=True)
        return [PartitionSpan(p, starts[p], max(starts[p], ends[p]), *marks[p]) for p in partitions]

    def _offsets(
        self, consumer: Consumer, bound: Bound, marks: dict[int, tuple[int, int]], is_end: bool
    ) -> dict[int, int]:
        """Each partition's offset for ``bound``, clamped into what the topic still holds."""
        if bound.timestamp_ms is not None:
            asked = [TopicPartition(self.topic, p, bound.timestamp_ms) for p in marks]
            found = consumer.offsets_for_times(asked, timeout=self.timeout)
            # -1: no record at or after the time, i.e. the partition's end
            wanted = {
                tp.partition: tp.offset if tp.offset >= 0 else marks[tp.partition][1]
                for tp in found
            }
        elif bound.offset is not None:
            wanted = dict.fromkeys(marks, bound.offset)
        elif bound.offsets:
            default = {p: (high if is_end else low) for p, (low, high) in marks.items()}
            wanted = {**default, **bound.offsets}
        else:
            wanted = {p: (high if is_end else low) for p, (low, high) in marks.items()}
        return {p: min(max(wanted[p], low), high) for p, (low, high) in marks.items()}

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
                if batch:
                    last_progress = time.monotonic()
                elif time.monotonic() - last_progress > self.timeout:
                    raise ServiceUnavailableError(
                        f"Reading {self.topic}[{span.partition}] stalled at offset "
                        f"{next_offset} before {span.end} for {self.timeout:g}s; check the "
                        f"broker at {self.settings.bootstrap_servers}."
                    )
                if kept:
                    # about _CONSUME_BYTES per call: big records (images) come fewer at a time
                    # and about one batch's records: memory stays O(batch), not O(topic)
                    size = sum(map(len, kept)) / len(kept)
                    if self._steps_per_record:
                        per_batch = self.batch_transitions // self._steps_per_record
                        self._consume_count = int(
                            min(_CONSUME, per_batch + 1, max(16, _CONSUME_BYTES // size))
                        )
                    self.stats.records += len(kept)
                    if self.on_records is not None:
                        self.on_records(len(kept))
                    yield kept
            consumer.unassign()

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

    def _decode(self, messages: list[Message]) -> ChunkBatch | None:
        """One consume() worth of records as a ChunkBatch (vectorized, per record if odd)."""
        values = [v or b"" for v in map(Message.value, messages)]
        columns, ok = decode_columns(values)
        parts: list[ChunkColumns] = []
        kept: list[int] = []
        bad: list[Undecodable] = []
        if ok.all() and columns is not None:
            parts, kept = [columns], list(range(len(messages)))
        else:
            fast_at = 0  # next chunk of ``columns`` not yet placed
            run: list[ExperienceChunk] = []
            for i, message in enumerate(messages):
                if ok[i] and columns is not None:
                    if run:
                        parts.append(from_chunks(run))
                        run = []
                    head, _ = split_columns(columns, fast_at + 1)
                    parts.append(split_columns(head, fast_at)[1])
                    fast_at += 1
                    kept.append(i)
                    continue
                try:
                    if message.value() is None:
                        raise DecodeError("Record has no value (a tombstone).")
                    run.append(self.codec.decode(values[i]))
                    kept.append(i)
                except DecodeError as exc:
                    bad.append(
                        Undecodable(message.partition() or 0, message.offset() or 0, str(exc))
                    )
            if run:
                parts.append(from_chunks(run))
        self.stats.undecodable += len(bad)
        if not kept:
            if not bad:
                return None
            return ChunkBatch(
                _EMPTY,
                np.zeros(0, np.int32),
                np.zeros(0, np.int64),
                np.zeros(0, np.int64),
                [],
                [],
                bad,
            )
        if len(kept) == len(messages):  # the common case: no per-record copies
            chosen, kept_values = messages, values
        else:
            chosen, kept_values = [messages[i] for i in kept], [values[i] for i in kept]
        if bad or len(kept) != len(messages) or not ok.all():
            fingerprints = [v[2:HEADER_SIZE] for v in kept_values]
            self.stats.schemas.update(fingerprints)
        else:  # the vectorized decoder accepts v1 records only
            fingerprints = [V1_FINGERPRINT] * len(kept_values)
            self.stats.schemas[V1_FINGERPRINT] += len(kept_values)
        self.stats.bytes += sum(map(len, kept_values))
        n = len(chosen)
        # one consume() reads one partition (they are read one after the other)
        partition = chosen[0].partition() or 0
        return ChunkBatch(
            concat_columns(parts) if len(parts) > 1 else parts[0],
            np.full(n, partition, dtype=np.int32),
            np.fromiter(map(Message.offset, chosen), np.int64, n),
            np.fromiter((t for _, t in map(Message.timestamp, chosen)), np.int64, n),
            fingerprints,
            kept_values,
            bad,
        )

    def chunk_batches(self) -> Iterator[ChunkBatch]:
        """Decoded chunks, cut at the first chunk boundary at or past ``batch_transitions``.

        The cut depends only on the records, never on how many a fetch returned, so the
        same range gives the same batches.
        """
        pending: list[ChunkBatch] = []
        held = 0
        for messages in self.messages():
            decoded = self._decode(messages)
            if decoded is None:
                continue
            pending.append(decoded)
            held += decoded.transitions
            if len(decoded):
                self._steps_per_record = max(1, decoded.transitions // len(decoded))
            while held >= self.batch_transitions:
                joined = ChunkBatch.join(pending)
                reached = np.cumsum(joined.columns.steps) >= self.batch_transitions
                cut = int(np.argmax(reached)) + 1
                head, tail = joined.split(cut)
                yield self._count(head)
                pending, held = ([tail] if len(tail) else []), tail.transitions
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
    start: str | None = None,
    end: str | None = None,
    batch_transitions: int = 65_536,
    registry: SchemaRegistry | None = None,
) -> ReplayReader:
    """A reader of ``run_id``'s experience topic (or ``topic``), opened; use it in ``with``.

    ``kafka`` defaults to ``KAFKA_BOOTSTRAP_SERVERS``, and the broker's security to the
    ``COACH_STREAM_KAFKA_*`` variables, as for the CLI; ``start``/``end`` take the
    ``--from``/``--to`` forms (``replay.range``).
    """
    import os

    from coach_stream.cli.kafka_env import kafka_settings  # this is an entry point too
    from coach_stream.replay.range import parse_bound

    servers = kafka or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not servers:
        raise ConfigError(
            "No Kafka address; pass kafka='HOST:PORT' or export KAFKA_BOOTSTRAP_SERVERS."
        )
    settings = kafka_settings(servers)
    name = resolve_topic(run_id or topic or "", settings.topic_prefix)
    reader = ReplayReader(
        settings,
        name,
        start=parse_bound(start, "--from"),
        end=parse_bound(end, "--to"),
        registry=registry,
        batch_transitions=batch_transitions,
    )
    return reader.open()


def resolve_topic(run_or_topic: str, prefix: str = "coach-stream") -> str:
    """A run id's experience topic, or the topic itself when given a full topic name."""
    from coach_stream.transport.settings import RunTopics

    if not run_or_topic:
        raise ConfigError("Name a run id or an experience topic to replay.")
    if run_or_topic.startswith(f"{prefix}.") and run_or_topic.count(".") >= 2:
        return run_or_topic
    return RunTopics.for_run(run_or_topic, prefix).experience
