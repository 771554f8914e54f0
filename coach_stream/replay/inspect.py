"""``replay inspect``: what a topic range holds, read once, streaming.

Partitions and their offsets, the time span, chunks and transitions, the policy versions
seen, completed episodes with their returns and lengths, the schema versions present,
``chunk_seq`` gaps and duplicates per ``(worker_id, env_index)``, undecodable records in the
range, the run's dead-letter count and the topic's retention. Memory: one batch plus a few
numbers per key and per episode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from confluent_kafka import KafkaException, TopicPartition

from coach_stream.codec import SchemaRegistry
from coach_stream.replay.batches import ChunkBatch
from coach_stream.replay.reader import ReplayReader
from coach_stream.transport import clients
from coach_stream.transport.admin import unreachable
from coach_stream.transport.names import consumer_group
from coach_stream.transport.retention import describe_retention
from coach_stream.transport.settings import KafkaSettings

MAX_EPISODES_LISTED = 10_000
"""Episodes listed one by one in the JSON report (all are counted in the summary)."""


@dataclass
class KeyStats:
    """One ``(worker_id, env_index)``'s chunks: ``chunk_seq`` must grow by exactly 1."""

    chunks: int = 0
    first_seq: int = -1
    last_seq: int = -1
    gaps: int = 0
    """chunk_seqs missing (lost, or expired by retention before the range)."""
    duplicates: int = 0
    """chunks whose chunk_seq is not above the previous one (written twice)."""


_EXAMPLES = 3  # undecodable records listed by where they are and why


@dataclass
class Inspection:
    topic: str
    partitions: list[dict[str, int]] = field(default_factory=list)
    retention: str = "unknown"
    records: int = 0
    chunks: int = 0
    transitions: int = 0
    undecodable: int = 0
    bytes: int = 0
    first_timestamp_ms: int | None = None
    last_timestamp_ms: int | None = None
    policy_versions: set[int] = field(default_factory=set)
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    episodes: list[dict[str, Any]] = field(default_factory=list)
    schemas: dict[str, int] = field(default_factory=dict)
    keys: dict[tuple[int, int], KeyStats] = field(default_factory=dict)
    run_ids: set[str] = field(default_factory=set)
    dead_letters: int = 0
    undecodable_first: list[dict[str, Any]] = field(default_factory=list)
    """The first few undecodable records: where each is and why (the count says how many)."""

    def add(self, batch: ChunkBatch) -> None:
        for bad in batch.undecodable[: _EXAMPLES - len(self.undecodable_first)]:
            where = {"partition": bad.partition, "offset": bad.offset, "reason": bad.reason}
            self.undecodable_first.append(where)
        c = batch.columns
        if len(c) == 0:
            return
        stamps = batch.timestamps_ms
        low, high = int(stamps.min()), int(stamps.max())
        if self.first_timestamp_ms is None or low < self.first_timestamp_ms:
            self.first_timestamp_ms = low
        if self.last_timestamp_ms is None or high > self.last_timestamp_ms:
            self.last_timestamp_ms = high
        self.policy_versions.update(np.unique(c.policy_version).tolist())
        self.run_ids.update(set(c.run_ids))
        ended = np.flatnonzero(~np.isnan(c.episode_return))
        self.episode_returns += c.episode_return[ended].tolist()
        self.episode_lengths += c.episode_length[ended].tolist()
        for i in ended[: max(0, MAX_EPISODES_LISTED - len(self.episodes))]:
            self.episodes.append(
                {
                    "worker_id": int(c.worker_id[i]),
                    "env_index": int(c.env_index[i]),
                    "partition": int(batch.partitions[i]),
                    "offset": int(batch.offsets[i]),
                    "return": float(c.episode_return[i]),
                    "length": int(c.episode_length[i]),
                }
            )
        self._sequences(c.worker_id, c.env_index, c.chunk_seq)

    def _sequences(self, worker: Any, env: Any, seq: Any) -> None:
        """Gaps and duplicates per key, vectorized within the batch."""
        key = (worker.astype(np.int64) << 32) | env.astype(np.int64)
        order = np.argsort(key, kind="stable")  # keeps each key's read (= write) order
        k, s = key[order], seq[order]
        starts = np.concatenate([[0], np.flatnonzero(np.diff(k)) + 1])
        ends = np.concatenate([starts[1:], [len(k)]])
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            name = (int(k[a] >> 32), int(k[a] & 0xFFFFFFFF))
            stats = self.keys.get(name)
            if stats is None:
                stats = self.keys[name] = KeyStats(first_seq=int(s[a]), last_seq=int(s[a]) - 1)
            previous = np.concatenate([[stats.last_seq], s[a : b - 1]])
            step = s[a:b] - previous
            stats.gaps += int(np.maximum(step - 1, 0).sum())
            stats.duplicates += int((step <= 0).sum())
            stats.chunks += b - a
            stats.last_seq = max(stats.last_seq, int(s[a:b].max()))

    def to_json(self) -> dict[str, Any]:
        returns, lengths = np.array(self.episode_returns), np.array(self.episode_lengths)

        def summary(values: Any) -> dict[str, float] | None:
            if not len(values):
                return None
            return {
                "mean": float(values.mean()),
                "min": float(values.min()),
                "max": float(values.max()),
            }

        return {
            "topic": self.topic,
            "run_ids": sorted(self.run_ids),
            "partitions": self.partitions,
            "retention": self.retention,
            "records": self.records,
            "chunks": self.chunks,
            "transitions": self.transitions,
            "undecodable": self.undecodable,
            "undecodable_first": self.undecodable_first,
            "bytes": self.bytes,
            "first_timestamp": _iso(self.first_timestamp_ms),
            "last_timestamp": _iso(self.last_timestamp_ms),
            "policy_versions": {
                "count": len(self.policy_versions),
                "min": min(self.policy_versions, default=None),
                "max": max(self.policy_versions, default=None),
            },
            "episodes": {
                "count": len(returns),
                "return": summary(returns),
                "length": summary(lengths),
                "listed": self.episodes,
            },
            "schemas": self.schemas,
            "sequences": {
                f"{w}/{e}": {
                    "chunks": s.chunks,
                    "first_seq": s.first_seq,
                    "last_seq": s.last_seq,
                    "gaps": s.gaps,
                    "duplicates": s.duplicates,
                }
                for (w, e), s in sorted(self.keys.items())
            },
            "gaps": sum(s.gaps for s in self.keys.values()),
            "duplicates": sum(s.duplicates for s in self.keys.values()),
            "dead_letters": self.dead_letters,
        }


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def schema_name(registry: SchemaRegistry, fingerprint: bytes) -> str:
    found = registry.by_fingerprint(fingerprint)
    if found is None:
        return f"unknown {fingerprint.hex()}"
    return f"{found.full_name.rsplit('.', 1)[-1]} v{found.version} ({fingerprint.hex()})"


def inspect(reader: ReplayReader, dead_letter_topic: str | None) -> Inspection:
    """Read ``reader``'s range once and describe it (``reader`` must be open)."""
    report = Inspection(reader.topic)
    report.partitions = [
        {
            "partition": s.partition,
            "low": s.low,
            "high": s.high,
            "start": s.start,
            "end": s.end,
        }
        for s in reader.spans
    ]
    report.retention = describe_retention(reader.settings, reader.topic, reader.timeout)
    for batch in reader.chunk_batches():
        report.add(batch)
    stats = reader.stats
    report.records, report.chunks, report.transitions = (
        stats.records,
        stats.chunks,
        stats.transitions,
    )
    report.undecodable, report.bytes = stats.undecodable, stats.bytes
    report.schemas = {
        schema_name(reader.registry, fp): count for fp, count in sorted(stats.schemas.items())
    }
    if dead_letter_topic is not None:
        report.dead_letters = count_records(reader.settings, dead_letter_topic, reader.timeout)
    return report


def count_records(settings: KafkaSettings, topic: str, timeout: float) -> int:
    """Records a topic holds now (high minus low watermark, all partitions); 0 if absent."""
    consumer = clients.consumer(settings, consumer_group("replay.count"))
    try:
        found = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if found is None or found.error is not None:
            return 0
        total = 0
        for p in found.partitions:
            low, high = clients.watermarks(consumer, TopicPartition(topic, p), timeout)
            total += high - low
        return total
    except KafkaException as exc:
        raise unreachable(settings, timeout, exc.args[0]) from exc
    finally:
        consumer.close()


__all__ = ["Inspection", "KeyStats", "count_records", "inspect"]
