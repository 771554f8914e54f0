"""The vectorized decoder agrees with the per-record codec, and declines what it must."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from coach_stream.codec import decode_chunk, encode_chunk
from coach_stream.codec.columnar import ColumnarDecoder, decode_columns
from coach_stream.codec.columns import ChunkColumns, from_chunks, split_columns
from coach_stream.core import ExperienceChunk
from coach_stream.errors import DecodeError
from coach_stream.testing.chunks import make_chunk


def _chunks() -> list[ExperienceChunk]:
    out = []
    for i in range(12):
        steps = [5, 1, 32, 0, 7][i % 5]
        out.append(make_chunk(steps, seed=i, ended=steps > 0 and i % 2 == 0, behaviour=i % 3 != 0))
    return out


def _assert_equal(a: ChunkColumns, b: ChunkColumns) -> None:
    for name in ChunkColumns.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            assert x is not None and y is not None, name
            assert x.dtype == y.dtype and x.shape == y.shape, name
            assert x.tobytes() == y.tobytes(), name
        else:
            assert x == y, name


def test_columns_equal_the_codec_record_by_record() -> None:
    chunks = _chunks()
    columns, ok = decode_columns([encode_chunk(c) for c in chunks])
    assert ok.all() and columns is not None
    _assert_equal(columns, from_chunks([decode_chunk(encode_chunk(c)) for c in chunks]))


@pytest.mark.parametrize("obs_shape", [(4,), (6, 5, 3)])
def test_mostly_full_chunks_with_episode_ends_of_every_length(obs_shape: tuple[int, ...]) -> None:
    # the usual topic: most chunks hold T steps, episode ends cut the rest short; the most
    # common length is copied one record at a time and the others one step at a time
    rng = np.random.default_rng(7)
    lengths = [32 if i % 4 else int(rng.integers(0, 32)) for i in range(90)]
    chunks = [
        make_chunk(n, seed=i, obs_shape=obs_shape, ended=n < 32, behaviour=i % 5 != 1)
        for i, n in enumerate(lengths)
    ]
    columns, ok = decode_columns([encode_chunk(c) for c in chunks])
    assert ok.all() and columns is not None
    assert columns.observations.shape == (sum(lengths) + len(lengths), *obs_shape)
    _assert_equal(columns, from_chunks([decode_chunk(encode_chunk(c)) for c in chunks]))


def test_big_varints_and_image_observations() -> None:
    base = make_chunk(3, obs_shape=(8, 8, 2), obs_dtype="uint8")
    chunks = [
        ExperienceChunk(**{**base.__dict__, "chunk_seq": 2**40 + i, "worker_id": 2**30 + i})
        for i in range(3)
    ]
    columns, ok = decode_columns([encode_chunk(c) for c in chunks])
    assert ok.all() and columns is not None
    assert columns.observations.shape == (12, 8, 8, 2)
    assert columns.chunk_seq.tolist() == [2**40, 2**40 + 1, 2**40 + 2]
    _assert_equal(columns, from_chunks(chunks))


def test_corrupted_records_are_left_to_the_codec() -> None:
    good = [encode_chunk(c) for c in _chunks()[:4]]
    flag_early = bytearray(encode_chunk(make_chunk(5, ended=False)))
    truncated = good[0][:-3]
    other_shape = encode_chunk(make_chunk(5, obs_shape=(3,)))
    records = [good[0], truncated, good[1], b"garbage", good[2], other_shape, good[3]]
    columns, ok = decode_columns(records)
    assert ok.tolist() == [True, False, True, False, True, False, True]
    assert columns is not None and len(columns) == 4
    with pytest.raises(DecodeError):
        decode_chunk(truncated)
    # the other shape is a valid chunk: the reader decodes it on the per-record path
    assert decode_chunk(other_shape).observations.shape == (6, 3)
    del flag_early


@pytest.mark.parametrize("place", [None, 0, 2])
def test_every_single_byte_corruption_is_declined_or_agrees_with_the_codec(
    place: int | None,
) -> None:
    # alone, and among records of its own layout: the decoder matches a read's records
    # against the bytes of one of them, so a damaged header must fail that match (and a
    # damaged record chosen as the one matched against must not mislead the others)
    record = encode_chunk(make_chunk(4, seed=3))
    good = [encode_chunk(replace(make_chunk(4, seed=3), chunk_seq=s)) for s in (1, 300, 70_000)]
    rng = np.random.default_rng(0)
    for position in range(len(record)):
        mutated = bytearray(record)
        mutated[position] = (mutated[position] + int(rng.integers(1, 256))) % 256
        read = [bytes(mutated)] if place is None else [*good[:place], bytes(mutated), *good[place:]]
        columns, ok = decode_columns(read)
        if place == 2:  # the layout is the first record's: these always fit it
            assert ok[[0, 1, 3]].all(), position
        if not ok.any():
            continue
        assert columns is not None
        expected = from_chunks([decode_chunk(v) for v, kept in zip(read, ok, strict=True) if kept])
        _assert_equal(columns, expected)


def test_a_decoder_keeps_its_layout_from_read_to_read_and_finds_a_new_one() -> None:
    decoder = ColumnarDecoder()
    flat = [make_chunk(5, seed=i, behaviour=True) for i in range(6)]
    images = [make_chunk(3, seed=i, obs_shape=(4, 4, 2), obs_dtype="uint8") for i in range(6)]
    reads = [
        flat[:3],
        flat[3:],  # the same layout: matched against the first read's record
        [flat[0], *images[:4]],  # another: found again, the odd one parsed field by field
        [*images[4:], flat[1]],
    ]
    templates = []
    for chunks in reads:
        values = [encode_chunk(c) for c in chunks]
        columns, ok = decoder.decode(values)
        templates.append(decoder.template)
        assert columns is not None
        kept = [decode_chunk(v) for v, k in zip(values, ok, strict=True) if k]
        _assert_equal(columns, from_chunks(kept))
        # the read's layout is its first chunk's: the other layout's record goes to the codec
        assert ok.tolist() == [
            c.observations.shape[1:] == chunks[0].observations.shape[1:] for c in chunks
        ]
    assert templates[1] is templates[0] and templates[2] is not templates[1]
    assert templates[3] is templates[2]


def test_split_keeps_each_chunks_rows() -> None:
    chunks = _chunks()
    columns = from_chunks(chunks)
    head, tail = split_columns(columns, 5)
    _assert_equal(head, from_chunks(chunks[:5]))
    _assert_equal(tail, from_chunks(chunks[5:]))


def test_run_ids_of_several_runs_stay_per_chunk() -> None:
    chunks = [
        ExperienceChunk(**{**make_chunk(3, seed=i).__dict__, "run_id": run})
        for i, run in enumerate(["a", "run-b", "a", "run-c"])
    ]
    columns, ok = decode_columns([encode_chunk(c) for c in chunks])
    assert ok.all() and columns is not None
    assert columns.run_ids == ["a", "run-b", "a", "run-c"]


def test_transitions_pair_each_step_with_its_next_observation_across_chunk_lengths() -> None:
    from coach_stream.replay.batches import ChunkBatch, to_transitions

    chunks = _chunks()  # lengths 5, 1, 32, 0 and 7, some with behaviour columns
    n = len(chunks)
    batch = ChunkBatch(
        from_chunks(chunks),
        np.zeros(n, np.int32),
        np.arange(n, dtype=np.int64),
        np.zeros(n, np.int64),
        [b""] * n,
        [b""] * n,
        [],
    )
    t = to_transitions(batch)
    want_obs = np.concatenate([c.observations[:-1] for c in chunks])
    want_next = np.concatenate([c.observations[1:] for c in chunks])
    assert t.observations.tobytes() == want_obs.tobytes()
    assert t.next_observations.tobytes() == want_next.tobytes()
    assert t.offset.tolist() == [i for i, c in enumerate(chunks) for _ in range(len(c.rewards))]
    assert len(t) == sum(len(c.rewards) for c in chunks)
