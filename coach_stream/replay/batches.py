"""What the replay reader hands out: chunks with their origin, and transition rows.

``ChunkBatch`` is decoded chunks as columns, each with the partition, offset, timestamp and
raw value it came from (exports copy the values as-is); ``TransitionBatch`` is the same
data one row per transition, what learners and Parquet exports consume.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from coach_stream.codec.columns import ChunkColumns, concat_columns, empty_columns, split_columns


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

    @staticmethod
    def only_undecodable(bad: list[Undecodable]) -> ChunkBatch:
        """A batch of no chunks: the records of a read that were all undecodable."""
        no_ints = np.zeros(0, np.int64)
        return ChunkBatch(empty_columns(), np.zeros(0, np.int32), no_ints, no_ints, [], [], bad)

    def _slice(self, columns: ChunkColumns, chunks: slice, bad: list[Undecodable]) -> ChunkBatch:
        return ChunkBatch(
            columns,
            self.partitions[chunks],
            self.offsets[chunks],
            self.timestamps_ms[chunks],
            self.fingerprints[chunks],
            self.values[chunks],
            bad,
        )

    def split(self, chunks: int) -> tuple[ChunkBatch, ChunkBatch]:
        """The first ``chunks`` chunks, and the rest (undecodable records go with the first)."""
        head, tail = split_columns(self.columns, chunks)
        return (
            self._slice(head, slice(None, chunks), self.undecodable),
            self._slice(tail, slice(chunks, None), []),
        )

    @staticmethod
    def join(parts: list[ChunkBatch]) -> ChunkBatch:
        if len(parts) == 1:
            return parts[0]
        # a read of undecodable records only has no chunks, and placeholder columns whose
        # observation shape is not the topic's: only its undecodable records join
        chunked = [p for p in parts if len(p)] or parts[:1]
        return ChunkBatch(
            concat_columns([p.columns for p in chunked]),
            np.concatenate([p.partitions for p in chunked]),
            np.concatenate([p.offsets for p in chunked]),
            np.concatenate([p.timestamps_ms for p in chunked]),
            [f for p in chunked for f in p.fingerprints],
            [v for p in chunked for v in p.values],
            [u for p in parts for u in p.undecodable],
        )


def take_batch(parts: list[ChunkBatch], transitions: int) -> tuple[ChunkBatch, list[ChunkBatch]]:
    """The first chunks of ``parts`` up to the first chunk boundary at or past
    ``transitions`` (all of them if they hold fewer), and the parts left after them.

    Only the parts the batch takes are joined, and only up to its cut: the rest stays a view
    (joining every part first copied a whole read, four batches, to hand out one: about 2 %
    of the reader's CPU on CartPole chunks).
    """
    taken: list[ChunkBatch] = []
    need = transitions
    for index, part in enumerate(parts):
        steps = np.cumsum(part.columns.steps)
        if len(steps) and steps[-1] >= need:
            cut = int(np.argmax(steps >= need)) + 1
            head, tail = part.split(cut)
            rest = ([tail] if len(tail) else []) + parts[index + 1 :]
            return ChunkBatch.join([*taken, head]), rest
        taken.append(part)
        need -= int(steps[-1]) if len(steps) else 0
    return ChunkBatch.join(taken), []


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
    total = int(steps.sum())
    # each chunk has T+1 observation rows: row t is step t's, row t+1 the next one's; the
    # k-th chunk's step rows sit k rows further on than in the transitions. Taking rows by
    # index is 6x faster than a boolean mask over (rows, features) observations.
    rows = np.arange(total, dtype=np.int64) + np.repeat(np.arange(len(steps)), steps)
    chunk_start = np.cumsum(steps) - steps
    step = np.arange(total, dtype=np.int64) - np.repeat(chunk_start - c.first_step, steps)
    ended = steps > 0
    last_rows = (np.cumsum(steps) - 1)[ended]
    episode_return = np.full(total, np.nan)
    episode_return[last_rows] = c.episode_return[ended]
    episode_length = np.full(total, -1, dtype=np.int64)
    episode_length[last_rows] = c.episode_length[ended]
    return TransitionBatch(
        observations=c.observations.take(rows, axis=0),
        next_observations=c.observations.take(rows + 1, axis=0),
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
