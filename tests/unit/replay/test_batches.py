"""A reader's reads decoded and cut into batches: the same cuts as joining every read first,
and chunks that cannot share the range's columns counted as undecodable, never a crash."""

from __future__ import annotations

import numpy as np
import pytest
from confluent_kafka import Message

from coach_stream.codec import ChunkCodec, default_registry, encode_chunk
from coach_stream.codec.columns import from_chunks
from coach_stream.core import ExperienceChunk
from coach_stream.replay.batches import ChunkBatch, Undecodable, take_batch
from coach_stream.replay.decode import Layout, ReaderStats, decode_records
from coach_stream.testing.chunks import make_chunk


def _part(steps: list[int], first_offset: int, bad: int = 0) -> ChunkBatch:
    n = len(steps)
    undecodable = [Undecodable(0, first_offset + n + i, "garbage") for i in range(bad)]
    if not n:  # a read whose records were all undecodable
        return ChunkBatch.only_undecodable(undecodable)
    columns = from_chunks([make_chunk(s, seed=first_offset + i) for i, s in enumerate(steps)])
    return ChunkBatch(
        columns,
        np.zeros(n, np.int32),
        np.arange(first_offset, first_offset + n, dtype=np.int64),
        np.zeros(n, np.int64),
        [b"f"] * n,
        [b"v%d" % (first_offset + i) for i in range(n)],
        undecodable,
    )


def _cut_after_joining_all(parts: list[ChunkBatch], transitions: int) -> ChunkBatch:
    joined = ChunkBatch.join(parts)
    reached = np.cumsum(joined.columns.steps) >= transitions
    return joined.split(int(np.argmax(reached)) + 1 if reached.any() else len(joined))[0]


@pytest.mark.parametrize("target", [1, 7, 40, 41, 100, 10_000])
def test_a_batch_is_cut_where_joining_every_read_first_cut_it(target: int) -> None:
    rng = np.random.default_rng(target)
    parts = [
        _part(rng.integers(0, 12, size).tolist(), 100 * k, bad=k % 2)
        for k, size in enumerate([5, 0, 3, 8, 1])
    ]
    expected = _cut_after_joining_all(parts, target)
    head, rest = take_batch(parts, target)
    assert head.offsets.tolist() == expected.offsets.tolist()
    assert head.values == expected.values
    for name in ("observations", "actions", "rewards", "terminated", "steps"):
        assert np.array_equal(getattr(head.columns, name), getattr(expected.columns, name))
    # nothing lost or repeated: the head and what is left hold every chunk once, in order
    left = ChunkBatch.join(rest) if rest else None
    offsets = head.offsets.tolist() + (left.offsets.tolist() if left else [])
    assert offsets == ChunkBatch.join(parts).offsets.tolist()
    undecodable = head.undecodable + (left.undecodable if left else [])
    assert sorted(u.offset for u in undecodable) == [100, 308]


def test_a_batch_inside_one_read_is_a_view_of_it() -> None:
    part = _part([4, 4, 4, 4], 0)
    head, rest = take_batch([part], 6)
    assert len(head) == 2 and len(rest) == 1 and len(rest[0]) == 2
    assert np.shares_memory(head.columns.observations, part.columns.observations)


def test_a_read_of_undecodable_records_only_joins_a_read_of_chunks() -> None:
    garbage, chunks = _part([], 0, bad=2), _part([3, 5], 10)
    joined = ChunkBatch.join([garbage, chunks])
    assert joined.offsets.tolist() == [10, 11] and joined.transitions == 8
    assert [u.offset for u in joined.undecodable] == [0, 1]


def _messages(chunks: list[ExperienceChunk], offsets: list[int] | None = None) -> list[Message]:
    at = offsets or list(range(len(chunks)))
    return [
        Message(topic="t", partition=0, offset=o, value=encode_chunk(c), timestamp=(1, 100 + o))
        for o, c in zip(at, chunks, strict=True)
    ]


@pytest.mark.parametrize("offsets", [[7, 8, 9, 10], [7, 9, 12, 13], [0, 1, 2, 40]])
def test_each_chunk_keeps_its_records_offset_with_or_without_gaps(offsets: list[int]) -> None:
    # a read's offsets are taken as a range when they are one (a compacted topic has gaps)
    chunks = [make_chunk(3, seed=i) for i in range(4)]
    batch = decode_records(
        _messages(chunks, offsets), ChunkCodec(default_registry()), ReaderStats()
    )
    assert batch is not None and batch.offsets.tolist() == offsets
    assert batch.timestamps_ms.tolist() == [100 + o for o in offsets]


def test_a_chunk_of_another_observation_shape_is_undecodable_not_a_crash() -> None:
    # concatenating (T, 4) and (T, 3) observations used to raise ValueError out of the reader
    chunks = [make_chunk(5, seed=i) for i in range(3)] + [make_chunk(5, obs_shape=(3,))]
    stats = ReaderStats()
    batch = decode_records(_messages(chunks), ChunkCodec(default_registry()), stats)
    assert batch is not None and len(batch) == 3 and batch.columns.observations.shape == (18, 4)
    [refused] = batch.undecodable
    assert refused.offset == 3 and "observations (3,) float32" in refused.reason
    assert "in a range of observations (4,) float32" in refused.reason


def test_a_read_of_another_layout_than_the_ranges_is_undecodable() -> None:
    images = [make_chunk(2, seed=i, obs_shape=(2, 2), obs_dtype="uint8") for i in range(2)]
    layout = Layout.of(np.zeros((1, 4), np.float32), np.zeros(1, np.int64))
    batch = decode_records(_messages(images), ChunkCodec(default_registry()), ReaderStats(), layout)
    assert batch is not None and len(batch) == 0 and len(batch.undecodable) == 2
    assert "observations (2, 2) uint8" in batch.undecodable[0].reason
