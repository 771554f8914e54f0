"""Batches cut from a reader's decoded reads: the same cuts as joining every read first."""

from __future__ import annotations

import numpy as np
import pytest

from coach_stream.codec.columns import from_chunks
from coach_stream.replay.batches import ChunkBatch, Undecodable, take_batch
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
