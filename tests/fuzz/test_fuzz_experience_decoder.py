"""Fuzz: the experience decoder and the trainer's door take any bytes without crashing.

Property: every input decodes to a chunk that keeps every invariant (it re-encodes to the
same bytes) or raises ``DecodeError``, the one error ``KafkaExperienceReader`` catches to
dead-letter a record; never another exception, never a hang, never an allocation that
grows with a declared length instead of the bytes actually present.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from coach_stream.codec import ChunkCodec, ChunkSpec, decode_chunk, default_registry, encode_chunk
from coach_stream.codec.chunks import CHUNK_SCHEMA
from coach_stream.codec.columnar import decode_columns
from coach_stream.codec.columns import ChunkColumns, from_chunks
from coach_stream.codec.fastpath import varint
from coach_stream.core import ExperienceChunk
from coach_stream.errors import DecodeError, InvalidChunkError
from coach_stream.testing.chunks import make_chunk
from coach_stream.transport import tail
from coach_stream.transport.reader import KafkaExperienceReader
from coach_stream.transport.settings import KafkaSettings, RunTopics

from .hostile import (
    FUZZ,
    NUM_ACTIONS,
    OBS_SHAPE,
    RUN_ID,
    TIMEOUT,
    arbitrary_bytes,
    bounded_memory,
    genuine_chunks,
    hostile_chunk_records,
    mutated,
    one_of_kinds,
)

pytestmark = TIMEOUT

GENUINE = genuine_chunks().map(encode_chunk)
ANY_RECORD = one_of_kinds(arbitrary_bytes(CHUNK_SCHEMA), GENUINE, hostile_chunk_records())
SPEC = ChunkSpec(run_id=RUN_ID, obs_shape=OBS_SHAPE, obs_dtype="float32", num_actions=NUM_ACTIONS)


# Found by the long run: shape (2, 2**62, 0) holds no elements, so 0 bytes matched, and
# numpy's ValueError escaped every decoder (the trainer's reader crashed on it, forever).
FOUND_SHAPE = (
    b"\xc3\x01x\n\xe3\xcb\xb3\x85\n\x02\x10"
    + b"\x00" * 13
    + b"\x0efloat32\x04\x04\x06\x000"
    + b"\x00" * 24
    + b"\x08bool\x06\x04"
    + b"\x80" * 9
    + b"\x01\x00\x00\x00\x0c"
    + b"\x00" * 9
    + b"\x01\x00\x00\x00\x00\x08\x00\x00\x00\x00\x00\x08"
    + b"\x00" * 9
)


def decode_or_reject(data: bytes) -> ExperienceChunk | None:
    """The chunk in ``data``, or None when the decoder refused it the one allowed way."""
    try:
        with bounded_memory(len(data)):
            return decode_chunk(data)
    except DecodeError:
        return None


def assert_valid(chunk: ExperienceChunk) -> None:
    """A decoded chunk passes every check the writer makes and round-trips bit-exactly."""
    encoded = encode_chunk(chunk)  # raises EncodeError for a chunk that breaks an invariant
    assert encode_chunk(decode_chunk(encoded)) == encoded


@FUZZ
@given(st.binary(max_size=512))
def test_arbitrary_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    chunk = decode_or_reject(data)
    if chunk is not None:
        assert_valid(chunk)


@FUZZ
@given(arbitrary_bytes(CHUNK_SCHEMA))
def test_bytes_behind_a_valid_header_decode_or_raise_decode_error(data: bytes) -> None:
    chunk = decode_or_reject(data)
    if chunk is not None:
        assert_valid(chunk)


@FUZZ
@given(GENUINE.flatmap(mutated))
@example(FOUND_SHAPE)
@example(  # the fast reader read created_at_ms 2**63 from a 10-byte varint
    encode_chunk(make_chunk())[: -len(varint(make_chunk().created_at_ms))] + b"\x80" * 9 + b"\x02"
)
def test_damaged_records_decode_or_raise_decode_error(data: bytes) -> None:
    chunk = decode_or_reject(data)
    if chunk is not None:
        assert_valid(chunk)


@FUZZ
@given(hostile_chunk_records())
@example(FOUND_SHAPE)
def test_hostile_field_values_decode_or_raise_decode_error(data: bytes) -> None:
    chunk = decode_or_reject(data)
    if chunk is not None:
        assert_valid(chunk)


@FUZZ
@given(st.one_of(GENUINE.flatmap(mutated), hostile_chunk_records()))
def test_fast_reader_and_fastavro_give_the_same_answer(data: bytes) -> None:
    codec = ChunkCodec(default_registry())
    try:
        reference = codec.decode_generic(data)
    except DecodeError:
        with pytest.raises(DecodeError):
            codec.decode(data)
        return
    # compared as bytes: a NaN field is equal to itself only there
    assert codec.encode(codec.decode(data)) == codec.encode(reference)


@FUZZ
@given(ANY_RECORD)
def test_the_trainers_door_lets_through_only_chunks_that_fit_the_run(data: bytes) -> None:
    chunk = decode_or_reject(data)
    if chunk is None:
        return
    try:
        SPEC.check(chunk)
    except InvalidChunkError:
        return
    assert chunk.run_id == RUN_ID and chunk.num_steps > 0
    assert chunk.observations.shape[1:] == OBS_SHAPE and chunk.observations.dtype == "float32"
    assert chunk.actions.dtype == "int64" and chunk.actions.shape == (chunk.num_steps,)
    assert chunk.actions.min() >= 0 and chunk.actions.max() < NUM_ACTIONS
    # a NaN or infinity that reaches a learner makes its loss NaN: the model is lost silently
    assert np.isfinite(chunk.observations).all() and np.isfinite(chunk.rewards).all()
    assert chunk.log_probs is None or np.isfinite(chunk.log_probs).all()
    assert chunk.episode_return is None or math.isfinite(chunk.episode_return)


def fitting_chunk() -> ExperienceChunk:
    chunk = make_chunk(obs_shape=OBS_SHAPE)
    return replace(chunk, run_id=RUN_ID, actions=chunk.actions % NUM_ACTIONS)


# Found by the test above: an infinite observation or episode return passed the door (the
# first makes every later loss NaN, the second the reported training return).
@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("observations", np.float32("inf"), "observations hold NaN or infinity"),
        ("observations", np.float32("nan"), "observations hold NaN or infinity"),
        ("episode_return", float("inf"), "episode_return is inf"),
        ("episode_return", float("nan"), "episode_return is nan"),
    ],
)
def test_non_finite_observations_and_returns_are_refused_at_the_door(
    field: str, value: float, reason: str
) -> None:
    good = fitting_chunk()
    SPEC.check(good)
    if field == "observations":
        observations = good.observations.copy()
        observations[-1, 0] = value
        bad = replace(good, observations=observations)
    else:
        bad = replace(good, episode_return=value)
    with pytest.raises(InvalidChunkError, match=reason):
        SPEC.check(decode_chunk(encode_chunk(bad)))


# ------------------------------------------------------------------ the reader's dead letters


class FakeMessage:
    """What ``KafkaExperienceReader.read`` reads of a confluent_kafka ``Message``."""

    def __init__(self, value: bytes | None, offset: int) -> None:
        self._value, self._offset = value, offset

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes:
        return b"0/0"

    def topic(self) -> str:
        return "coach-stream.fuzz-run.experience"


class FakeConsumer:
    def __init__(self, messages: list[FakeMessage]) -> None:
        self.messages = messages

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        taken, self.messages = self.messages[:num_messages], self.messages[num_messages:]
        return taken

    def poll(self, timeout: float) -> FakeMessage | None:
        return self.messages.pop(0) if self.messages else None

    def commit(self, *args: object, **kwargs: object) -> None:
        pass  # positions only inform lag tools


class FakeDeadLetter:
    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes, dict[str, str]]] = []

    def produce(self, key: bytes | None, value: bytes, headers: list[tuple[str, str]]) -> None:
        self.records.append((key, value, dict(headers)))

    def flush(self, timeout: float) -> None:
        pass

    def close(self) -> None:
        pass


def reader_over(values: list[bytes | None]) -> tuple[KafkaExperienceReader, FakeDeadLetter]:
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:9")  # never contacted
    reader = KafkaExperienceReader(settings, RunTopics.for_run(RUN_ID), "fuzz", spec=SPEC)
    dead = FakeDeadLetter()
    fakes: dict[str, Any] = {
        "_consumer": FakeConsumer([FakeMessage(v, i) for i, v in enumerate(values)]),
        "_dead_letter": dead,
        "_next": {0: 0},
    }
    reader.__dict__.update(fakes)
    return reader, dead


@FUZZ
@given(st.lists(st.none() | ANY_RECORD, min_size=1, max_size=8))
def test_the_reader_returns_good_chunks_and_dead_letters_the_rest(
    values: list[bytes | None],
) -> None:
    reader, dead = reader_over(values)
    chunks = reader.read(max_chunks=len(values), timeout=0.0)
    assert len(chunks) + len(dead.records) == len(values)
    assert reader.stats.dead_lettered == len(dead.records)
    assert reader.positions() == {0: len(values)}
    for chunk in chunks:
        SPEC.check(chunk)
    for _key, value, headers in dead.records:
        assert value in [v or b"" for v in values]  # the original bytes, untouched
        assert headers["error"] and headers["error.kind"] in ("invalid", "undecodable")


# ------------------------------------------------------------------ a restarted worker's scan


class KeyedMessage(FakeMessage):
    def __init__(self, value: bytes, key: bytes) -> None:
        super().__init__(value, 0)
        self._key = key

    def key(self) -> bytes:
        return self._key


# Found while fuzzing: a chunk_seq of 2**63 - 1 filed under a worker's key made it continue
# at 2**63 (OverflowError in the chunker on every restart); a chunk of worker 3 env 2
# filed under key 0/0 moved worker 0's counter.
@FUZZ
@given(ANY_RECORD, st.sampled_from([b"0/0", b"3/1", b"70/70"]))
@example(encode_chunk(replace(make_chunk(), chunk_seq=2**63 - 1)), b"3/2")
@example(encode_chunk(replace(make_chunk(), chunk_seq=2**62)), b"3/2")
@example(encode_chunk(make_chunk()), b"0/0")
@example(FOUND_SHAPE, b"0/0")
def test_a_restarted_worker_continues_only_at_chunk_seqs_it_can_write(
    data: bytes, key: bytes
) -> None:
    message: Any = KeyedMessage(data, key)
    seq = tail._chunk_seq(message)
    if seq is None:
        return
    chunk = decode_chunk(data)
    assert chunk.key.encode() == key  # its own record, not one filed under its key
    assert 0 <= seq < tail.MAX_CHUNK_SEQ  # the next chunk_seqs still fit an Avro long


def test_the_scan_still_takes_a_workers_own_chunk_seq() -> None:
    message: Any = KeyedMessage(encode_chunk(replace(make_chunk(), chunk_seq=41)), b"3/2")
    assert tail._chunk_seq(message) == 41


# ------------------------------------------------------------------ replay's batch decoder


@st.composite
def reads_of_one_layout(draw: st.DrawFn) -> list[bytes]:
    """A read as a topic holds them: chunks of one layout, which the batch decoder matches
    against the bytes of one of them, with their integers (varints of several lengths) and
    data drawn apart, and some of them damaged anywhere, headers included."""
    base = draw(genuine_chunks())
    values = []
    for _ in range(draw(st.integers(min_value=2, max_value=8))):
        chunk = replace(
            base,
            chunk_seq=draw(st.integers(min_value=0, max_value=2**40)),
            policy_version=draw(st.integers(min_value=0, max_value=1000)),
            first_step=draw(st.integers(min_value=0, max_value=10_000)),
            created_at_ms=draw(st.integers(min_value=0, max_value=2**42)),
            observations=base.observations + np.float32(draw(st.integers(0, 9))),
        )
        data = encode_chunk(chunk)
        values.append(draw(mutated(data)) if draw(st.integers(0, 3)) == 0 else data)
    return values


@FUZZ
@given(st.one_of(st.lists(st.one_of(GENUINE, ANY_RECORD), min_size=1, max_size=6),
                 reads_of_one_layout()))  # fmt: skip
def test_replays_batch_decoder_accepts_only_what_the_codec_decodes_the_same(
    values: list[bytes],
) -> None:
    with bounded_memory(sum(map(len, values)), factor=16):
        columns, ok = decode_columns(values)
    assert len(ok) == len(values)
    if not ok.any():
        assert columns is None
        return
    assert columns is not None
    expected = from_chunks([decode_chunk(v) for v, kept in zip(values, ok, strict=True) if kept])
    for name in ChunkColumns.__dataclass_fields__:
        mine, codec = getattr(columns, name), getattr(expected, name)
        if isinstance(codec, np.ndarray):
            assert isinstance(mine, np.ndarray), name
            assert (mine.dtype, mine.shape) == (codec.dtype, codec.shape), name
            assert mine.tobytes() == codec.tobytes(), name
        else:
            assert mine == codec, name


def _with_observations(shape: list[int], data: bytes = b"") -> bytes:
    record = {**ChunkCodec(default_registry())._codec.decode(encode_chunk(make_chunk(2)))}
    record["observations"] = {"dtype": "uint8", "shape": shape, "data": data}
    return ChunkCodec(default_registry())._codec.encode(record)


# Found by the long run too: a trailing 0 made numpy's reshape(-1, ...) fail, and an int64
# product of dimensions wraps around (2**32 * 2**32 "is" 0 elements).
@pytest.mark.parametrize(
    "shape", [[3, 0], [3, 2**62, 0], [3, 2**40, 2**40, 0], [3, 2**32, 2**32, 1], [3, 2**32, 2**32]]
)
def test_the_batch_decoder_survives_zero_and_wrapping_shapes(shape: list[int]) -> None:
    record = _with_observations(shape)
    columns, ok = decode_columns([record, encode_chunk(make_chunk(2))])
    try:
        chunk = decode_chunk(record)
    except DecodeError:
        assert not ok[0]
        return
    assert ok[0] and columns is not None and chunk.observations.shape == (3, 0)
    assert columns.observations.shape[1:] == (0,)
