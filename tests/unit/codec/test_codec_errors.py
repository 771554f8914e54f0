"""What the codec's errors say: the column, the numbers and the fix, on both paths.

The fast writer and reader handle every valid v1 chunk, so the fastavro path (the
reference, and the one for other schema versions) is driven directly here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from coach_stream.codec import (
    ChunkCodec,
    SingleObjectCodec,
    decode_chunk,
    default_registry,
    encode_chunk,
)
from coach_stream.codec.chunks import CHUNK_SCHEMA
from coach_stream.codec.fastpath import varint
from coach_stream.errors import DecodeError, EncodeError
from coach_stream.testing.chunks import make_chunk

COLUMNS = ("observations", "actions", "rewards", "terminated", "truncated", "log_probs", "values")


def avro_codec() -> SingleObjectCodec:
    registry = default_registry()
    return SingleObjectCodec(registry, registry.latest(CHUNK_SCHEMA))


def record_of(chunk_bytes: bytes) -> dict[str, Any]:
    return dict(avro_codec().decode(chunk_bytes))


@pytest.mark.parametrize("column", COLUMNS)
def test_a_column_with_an_unknown_dtype_is_named_on_the_fastavro_path(column: str) -> None:
    codec = ChunkCodec(default_registry())
    record = record_of(codec.encode(make_chunk()))
    record[column] = {**record[column], "dtype": "floatXX"}
    with pytest.raises(DecodeError, match=f"Field {column} declares unknown dtype 'floatXX'"):
        codec.decode_generic(avro_codec().encode(record))


@pytest.mark.parametrize("column", COLUMNS)
def test_a_column_of_a_dtype_the_wire_cannot_carry_is_named(column: str) -> None:
    chunk = make_chunk()
    bad = getattr(chunk, column).astype(np.complex64)
    with pytest.raises(EncodeError, match=f"Field {column} has dtype complex64"):
        ChunkCodec(default_registry()).encode_generic(replace(chunk, **{column: bad}))


def test_the_fastavro_path_checks_the_chunk_it_decodes() -> None:
    codec = ChunkCodec(default_registry())
    chunk = make_chunk(steps=5)
    short = replace(chunk, observations=chunk.observations[:3])  # T+1 = 6 rows expected
    with pytest.raises(DecodeError, match="observations must have 6 rows"):
        codec.decode_generic(codec.encode_generic(short))  # encode_generic does not check


def test_a_size_mismatch_gives_both_byte_counts() -> None:
    codec = ChunkCodec(default_registry())
    record = record_of(codec.encode(make_chunk(steps=6)))
    record["rewards"] = {**record["rewards"], "dtype": "float64"}  # 6 x 8 bytes declared
    with pytest.raises(
        DecodeError, match=r"Field rewards declares float64\(6,\) = 48 bytes but carries 24"
    ):
        codec.decode_generic(avro_codec().encode(record))


def test_negative_and_too_many_dimensions_are_refused_by_name() -> None:
    codec = ChunkCodec(default_registry())
    record = record_of(codec.encode(make_chunk(steps=6)))
    record["values"] = {**record["values"], "shape": [-6]}
    with pytest.raises(
        DecodeError, match=r"Field values declares a negative dimension in shape \[-6\]"
    ):
        codec.decode_generic(avro_codec().encode(record))
    record["values"] = {**record["values"], "shape": [1] * 9}
    with pytest.raises(DecodeError, match=r"Field values declares 9 dimensions \(> 8\)"):
        codec.decode_generic(avro_codec().encode(record))


def test_eight_dimensions_travel_and_nine_do_not() -> None:
    codec = ChunkCodec(default_registry())
    eight = make_chunk(steps=1, obs_shape=(1, 1, 1, 1, 1, 2, 2))  # (T+1, ...) = 8 dimensions
    for data in (codec.encode(eight), codec.encode_generic(eight)):
        assert codec.decode_generic(data).equals(eight)
        assert codec.decode(data).equals(eight)
    nine = make_chunk(steps=1, obs_shape=(1, 1, 1, 1, 1, 1, 2, 2))
    with pytest.raises(EncodeError, match="Field observations has 9 dimensions; at most 8"):
        codec.encode_generic(nine)
    with pytest.raises(EncodeError, match="Field observations has 9 dimensions; at most 8"):
        codec.encode(nine)


def test_header_errors_say_what_the_bytes_are() -> None:
    with pytest.raises(DecodeError, match="Record of 3 bytes is too short"):
        decode_chunk(b"\xc3\x01\x00")
    with pytest.raises(DecodeError, match="Record starts with 0001, not the Avro single-object"):
        decode_chunk(b"\x00\x01" + b"\x00" * 30)
    with pytest.raises(DecodeError, match="fingerprint 0101010101010101; the writer used"):
        decode_chunk(b"\xc3\x01" + b"\x01" * 8 + b"\x00" * 30)


def test_trailing_bytes_are_counted() -> None:
    data = ChunkCodec(default_registry()).encode(make_chunk())
    with pytest.raises(
        DecodeError, match=r"^3 unexpected bytes after a io\.coachstream\.ExperienceChunk"
    ):
        decode_chunk(data + b"\x00\x00\x00")


def test_a_value_fastavro_cannot_write_names_the_record_and_the_fix() -> None:
    with pytest.raises(
        EncodeError,
        match=r"Cannot encode a io\.coachstream\.ExperienceChunk: \w+: .*; fix the value's fields",
    ):
        avro_codec().encode({"run_id": 5})


@pytest.mark.parametrize("shape", [[7, 2**62, 0], [7, 0, 2**62], [7, 2**40, 2**40, 0]])
def test_a_shape_numpy_cannot_hold_is_a_decode_error(shape: list[int]) -> None:
    # Found by tests/fuzz: no elements, so the size matched 0 bytes, and numpy's ValueError
    # escaped decode_chunk (a record that crashed the trainer's reader on every restart).
    codec = ChunkCodec(default_registry())
    record = record_of(codec.encode(make_chunk(steps=6)))
    record["observations"] = {"dtype": "uint8", "shape": shape, "data": b""}
    data = avro_codec().encode(record)
    for decode in (codec.decode, codec.decode_generic, decode_chunk):
        with pytest.raises(DecodeError, match=r"Field observations declares shape \(7, .*no array"):
            decode(data)


@pytest.mark.parametrize("tail", [b"\x80" * 9 + b"\x02", b"\xff" * 9 + b"\x7f"])
def test_a_varint_beyond_64_bits_decodes_as_fastavro_decodes_it(tail: bytes) -> None:
    # Found by tests/fuzz: the fast reader read created_at_ms 2**63 (no long, so the chunk
    # could not be written again) where fastavro wraps the bits; now it leaves it to fastavro.
    chunk = make_chunk()
    data = encode_chunk(chunk)[: -len(varint(chunk.created_at_ms))] + tail
    codec = ChunkCodec(default_registry())
    decoded = codec.decode(data)
    assert decoded.equals(codec.decode_generic(data))
    assert -(2**63) <= decoded.created_at_ms < 2**63
    assert decode_chunk(encode_chunk(decoded)).equals(decoded)
