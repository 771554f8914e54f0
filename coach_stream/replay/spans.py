"""A ``--from``/``--to`` range resolved, per partition, into offsets the topic still holds."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition

from coach_stream.errors import ConfigError
from coach_stream.replay.range import Bound
from coach_stream.transport import clients


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


def resolve_spans(
    consumer: Consumer, topic: str, start: Bound, end: Bound, timeout: float, servers: str
) -> list[PartitionSpan]:
    """Every partition of ``topic`` with its offsets for ``[start, end)``, in partition order.

    ``ConfigError`` when the topic does not exist on ``servers`` or a bound names
    partitions it lacks; the caller turns a ``KafkaException`` into its sentence.
    """
    # not assigned yet: a refused login surfaces at once (clients.metadata)
    metadata = clients.metadata(consumer, timeout, topic)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        raise ConfigError(
            f"Topic {topic} does not exist on {servers}; "
            "check the run id (`coach-stream status`) or the topic name."
        )
    partitions = sorted(found.partitions)
    for bound, option in ((start, "--from"), (end, "--to")):
        unknown = sorted(set(bound.offsets) - set(partitions))
        if unknown:
            raise ConfigError(
                f"{option} {bound.text!r} names partitions {unknown}, but {topic} has "
                f"partitions {partitions}; use partitions that exist."
            )
    marks = {p: clients.watermarks(consumer, TopicPartition(topic, p), timeout) for p in partitions}
    starts = _offsets(consumer, topic, start, marks, timeout, is_end=False)
    ends = _offsets(consumer, topic, end, marks, timeout, is_end=True)
    return [PartitionSpan(p, starts[p], max(starts[p], ends[p]), *marks[p]) for p in partitions]


def _offsets(
    consumer: Consumer,
    topic: str,
    bound: Bound,
    marks: dict[int, tuple[int, int]],
    timeout: float,
    is_end: bool,
) -> dict[int, int]:
    """Each partition's offset for ``bound``, clamped into what the topic still holds."""
    open_end = {p: (high if is_end else low) for p, (low, high) in marks.items()}
    if bound.timestamp_ms is not None:
        asked = [TopicPartition(topic, p, bound.timestamp_ms) for p in marks]
        found = consumer.offsets_for_times(asked, timeout=timeout)
        # -1: no record at or after the time, i.e. the partition's end
        wanted = {
            tp.partition: tp.offset if tp.offset >= 0 else marks[tp.partition][1] for tp in found
        }
    elif bound.offset is not None:
        wanted = dict.fromkeys(marks, bound.offset)
    else:  # per-partition offsets, the others open; or earliest/latest
        wanted = {**open_end, **bound.offsets}
    return {p: min(max(wanted[p], low), high) for p, (low, high) in marks.items()}
