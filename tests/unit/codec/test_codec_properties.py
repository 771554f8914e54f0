"""Property: valid chunks round-trip bit-exactly; mutated bytes decode or raise DecodeError."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from coach_stream.codec import ChunkCodec, decode_chunk, default_registry, encode_chunk
from coach_stream.codec.fastpath import ChunkReaderV1
from coach_stream.codec.tensors import DTYPES
from coach_stream.core import ExperienceChunk
from coach_stream.errors import DecodeError
from coach_stream.testing.chunks import make_chunk

# The mutation check (docs/testing.md) runs these once per mutant and lowers the count.
EXAMPLES = int(os.environ.get("COACH_STREAM_PROPERTY_EXAMPLES", "100"))

_ints = st.integers(min_value=0, max_value=2**31 - 1)
_longs = st.integers(min_value=0, max_value=2**63 - 1)


@st.composite
def chunks(draw: st.DrawFn) -> ExperienceChunk:
    steps = draw(st.integers(min_value=0, max_value=12))
    obs_shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, max_side=5))
    obs_dtype = draw(st.sampled_from(sorted(DTYPES)))
    act_shape = draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=3))
    act_dtype = draw(st.sampled_from(["int64", "int32", "float32", "uint8"]))

    def column(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
        return draw(hnp.arrays(np.dtype(dtype), shape))

    ended = draw(st.sampled_from(["no", "terminated", "truncated"])) if steps else "no"
    terminated = np.zeros(steps, bool)
    truncated = np.zeros(steps, bool)
    if ended == "terminated":
        terminated[-1] = True
    elif ended == "truncated":
        truncated[-1] = True
    behaviour = draw(st.booleans())
    return ExperienceChunk(
        run_id=draw(st.text(max_size=20)),
        worker_id=draw(_ints),
        env_index=draw(_ints),
        chunk_seq=draw(_longs),
        policy_version=draw(_longs),
        first_step=draw(_longs),
        observations=column(obs_dtype, (steps + 1, *obs_shape)),
        actions=column(act_dtype, (steps, *act_shape)),
        rewards=column("float32", (steps,)),
        terminated=terminated,
        truncated=truncated,
        log_probs=column("float32", (steps,)) if behaviour else None,
        values=column("float32", (steps,)) if behaviour else None,
        episode_return=draw(st.none() | st.floats(allow_nan=False)),
        episode_length=draw(st.none() | _longs),
        created_at_ms=draw(_longs),
    )


@settings(max_examples=EXAMPLES, deadline=None)
@given(chunks())
def test_round_trip_is_bit_exact(chunk: ExperienceChunk) -> None:
    assert decode_chunk(encode_chunk(chunk)).equals(chunk)


@settings(max_examples=EXAMPLES, deadline=None)
@given(chunks(), st.data())
def test_mutated_bytes_never_crash(chunk: ExperienceChunk, data: st.DataObject) -> None:
    encoded = bytearray(encode_chunk(chunk))
    position = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    encoded[position] = data.draw(st.integers(min_value=0, max_value=255))
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded)))
    try:
        decoded = decode_chunk(bytes(encoded[:cut]))
    except DecodeError:
        return
    # Whatever decodes passed every check the encoder makes, and round-trips unchanged.
    assert decode_chunk(encode_chunk(decoded)).equals(decoded)


@settings(max_examples=EXAMPLES, deadline=None)
@given(chunks())
def test_fast_writer_emits_exactly_fastavros_bytes(chunk: ExperienceChunk) -> None:
    codec = ChunkCodec(default_registry())
    assert codec.encode(chunk) == codec.encode_generic(chunk)


def test_fast_writer_normalises_layouts_like_fastavro() -> None:
    codec = ChunkCodec(default_registry())
    base = make_chunk(steps=5, obs_shape=(3,))
    odd = ExperienceChunk(
        **{
            **base.__dict__,
            "observations": np.asfortranarray(
                base.observations.astype(base.observations.dtype.newbyteorder(">"))
            ),
            "episode_return": -0.0,
            "episode_length": 2**40,
            "created_at_ms": 2**62,
        }
    )
    assert codec.encode(odd) == codec.encode_generic(odd)
    assert decode_chunk(codec.encode(odd)).equals(
        ExperienceChunk(
            **{
                **odd.__dict__,
                "observations": np.ascontiguousarray(
                    odd.observations, dtype=odd.observations.dtype.newbyteorder("<")
                ),
            }
        )
    )


@settings(max_examples=EXAMPLES, deadline=None)
@given(chunks(), st.data())
def test_fast_reader_agrees_with_fastavro(chunk: ExperienceChunk, data: st.DataObject) -> None:
    codec = ChunkCodec(default_registry())
    encoded = bytearray(codec.encode(chunk))
    if data.draw(st.booleans()):
        position = data.draw(st.integers(min_value=10, max_value=len(encoded) - 1))
        encoded[position] = data.draw(st.integers(min_value=0, max_value=255))
    raw = bytes(encoded)
    try:
        reference = codec.decode_generic(raw)
    except DecodeError:
        reference = None
    if reference is None:
        with pytest.raises(DecodeError):
            codec.decode(raw)
    else:
        assert codec.decode(raw).equals(reference)


@settings(max_examples=EXAMPLES, deadline=None)
@given(chunks())
def test_fast_reader_decodes_every_valid_v1_record_itself(chunk: ExperienceChunk) -> None:
    # The reader is an accelerator: a valid record must not need the fastavro fallback.
    assert ChunkReaderV1().decode(encode_chunk(chunk)).equals(chunk)


def test_v1_chunks_take_the_fast_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    def fastavro_path(self: ChunkCodec, value: object) -> None:
        raise AssertionError("the fastavro path was taken for a v1 chunk")

    monkeypatch.setattr(ChunkCodec, "encode_generic", fastavro_path)
    monkeypatch.setattr(ChunkCodec, "decode_generic", fastavro_path)
    chunk = make_chunk()
    assert decode_chunk(encode_chunk(chunk)).equals(chunk)
