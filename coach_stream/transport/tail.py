"""Where a restarted worker's ``chunk_seq``s continue: the last ones in the experience topic.

``chunk_seq`` is monotonic per key ``<worker_id>/<env_index>``; a worker that restarts
(``kill -9``, a crash, a rescheduled job) has lost its counters, so it reads them back from
the log instead of starting again at 0. Each key lives on one partition, the one
librdkafka's ``consistent_random`` partitioner picks (CRC-32 of the key modulo the partition
count; ``KafkaSettings`` pins that partitioner), and per-key order is kept there, so the
key's last record in that partition holds its last acknowledged ``chunk_seq``.

The search reads each partition backward in windows (``window`` records, doubling up to
``max_window``) from the high watermark until every key of the worker has been seen or the
low watermark is reached. Cost: a restarted worker finds its keys in the first window (it
wrote them moments ago); a key that was never written (a new worker, or an env that had not
finished a chunk) reads its partition back to the low watermark, once, at start.
"""

from __future__ import annotations

import time
import zlib

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from coach_stream.codec import decode_chunk
from coach_stream.errors import DecodeError, ServiceUnavailableError
from coach_stream.transport import clients
from coach_stream.transport.names import consumer_group
from coach_stream.transport.settings import KafkaSettings

WINDOW = 64
MAX_WINDOW = 4096
MAX_CHUNK_SEQ = 2**62
"""A ``chunk_seq`` at or above this is not a worker's (2**62 chunks at a million a second take
146,000 years): continuing after it could overflow the Avro long, so it is skipped."""
_BATCH = 500
_METADATA_SETTLE_S = 10.0


def partition_for(key: bytes, partitions: int) -> int:
    """The partition librdkafka's ``consistent_random`` partitioner gives a non-empty key."""
    return zlib.crc32(key) % partitions


def next_chunk_seqs(
    settings: KafkaSettings,
    topic: str,
    worker_id: int,
    num_envs: int,
    *,
    timeout: float = 120.0,
    window: int = WINDOW,
    max_window: int = MAX_WINDOW,
) -> list[int]:
    """Per env of ``worker_id``: one past its last ``chunk_seq`` in ``topic`` (0 if none)."""
    deadline = time.monotonic() + timeout
    # Nothing is committed; the group id only satisfies librdkafka.
    group = consumer_group("chunk-seq-scan", private=True)
    consumer = clients.consumer(settings, group, **{"enable.partition.eof": True})
    try:
        partitions = _partition_count(consumer, settings, topic, timeout)
        by_partition: dict[int, dict[bytes, int]] = {}
        for env in range(num_envs):
            key = f"{worker_id}/{env}".encode()
            by_partition.setdefault(partition_for(key, partitions), {})[key] = env
        seqs = [0] * num_envs
        for partition, keys in sorted(by_partition.items()):
            scan = _Scan(consumer, settings, topic, partition, deadline)
            for env, last in scan.last_seqs(keys, window, max_window).items():
                seqs[env] = last + 1
        return seqs
    finally:
        consumer.close()


def _partition_count(
    consumer: Consumer, settings: KafkaSettings, topic: str, timeout: float
) -> int:
    # A broker other than the one that created the topic may learn of it a moment later.
    deadline = time.monotonic() + min(timeout, _METADATA_SETTLE_S)
    while True:
        try:
            found = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        except KafkaException as exc:
            raise _unavailable(settings, topic, exc.args[0]) from exc
        known = found is not None and found.error is None and bool(found.partitions)
        if known or time.monotonic() >= deadline:
            break
        time.sleep(0.1)  # polling the broker's metadata, nothing to wait on
    if found is None or not known:
        raise ServiceUnavailableError(
            f"Topic {topic} does not exist on {settings.bootstrap_servers}; start the run with "
            "`coach-stream launch` (it creates the topics) or check the run id."
        )
    return len(found.partitions)


def _unavailable(settings: KafkaSettings, topic: str, cause: object) -> ServiceUnavailableError:
    if isinstance(cause, KafkaError):
        cause = cause.str()
    return ServiceUnavailableError(
        f"Could not read the last chunk_seqs from {topic} ({cause}); check the broker at "
        f"{settings.bootstrap_servers}."
    )


class _Scan:
    """Backward windows over one partition."""

    def __init__(
        self,
        consumer: Consumer,
        settings: KafkaSettings,
        topic: str,
        partition: int,
        deadline: float,
    ) -> None:
        self.consumer, self.settings, self.topic = consumer, settings, topic
        self.partition, self.deadline = partition, deadline

    def last_seqs(self, keys: dict[bytes, int], window: int, max_window: int) -> dict[int, int]:
        """env -> last chunk_seq, for each of ``keys`` (key -> env) found in the partition."""
        tp = TopicPartition(self.topic, self.partition)
        try:
            low, high = clients.watermarks(self.consumer, tp, self._left())
        except KafkaException as exc:
            raise _unavailable(self.settings, self.topic, exc.args[0]) from exc
        left, found, end = dict(keys), {}, high
        while left and end > low:
            start = max(low, end - window)
            for key, seq in self._window(start, end, left).items():
                found[left.pop(key)] = seq
            end, window = start, min(window * 2, max_window)
        return found

    def _window(self, start: int, end: int, keys: dict[bytes, int]) -> dict[bytes, int]:
        """The last decodable ``chunk_seq`` of each of ``keys`` in offsets [start, end)."""
        self.consumer.assign([TopicPartition(self.topic, self.partition, start)])
        last: dict[bytes, int] = {}
        expected = end - start + 1  # the window, then the record at `end` or the EOF event
        while True:
            if self._left() <= 0:  # also bounds a stream of transient errors
                raise _unavailable(self.settings, self.topic, "timed out")
            # consume() returns early only once it has as many as asked: ask for what is left
            want = max(1, min(_BATCH, expected))
            batch = self.consumer.consume(want, timeout=min(self._left(), 1.0))
            expected -= len(batch)
            for message in batch:
                if self._done(message, end):
                    return last
                key = message.key()
                if isinstance(key, bytes) and key in keys:
                    seq = _chunk_seq(message)
                    if seq is not None:
                        last[key] = seq

    def _done(self, message: Message, end: int) -> bool:
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                return True
            if error.fatal() or error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise _unavailable(self.settings, self.topic, error.str())
            return False  # transient: librdkafka retries by itself
        offset = message.offset()
        return offset is not None and offset >= end

    def _left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


def _chunk_seq(message: Message) -> int | None:
    """The record's chunk_seq, or None for a record the worker cannot have written (skipped).

    Besides undecodable records, that is a chunk whose body names another worker or env than
    its key, and one with an absurd ``chunk_seq``: anyone who can write to the topic could
    otherwise file a chunk with ``chunk_seq`` 2**63 - 1 under a worker's key, and that
    worker would crash on every restart (its next ``chunk_seq`` fits no int64).
    """
    try:
        chunk = decode_chunk(message.value() or b"")
    except DecodeError:
        return None
    if message.key() != chunk.key.encode() or chunk.chunk_seq >= MAX_CHUNK_SEQ:
        return None
    return chunk.chunk_seq
