"""Chunk codec: bit-exact round trips, invariants, and typed errors for hostile bytes."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from coach_stream.codec import decode_chunk, decode_control, encode_chunk, encode_control
from coach_stream.codec.avro import HEADER_SIZE, MAGIC
from coach_stream.core import ExperienceChunk, PolicyVersion
from coach_stream.errors import DecodeError, EncodeError
from coach_stream.testing.chunks import make_chunk


@pytest.mark.parametrize("behaviour", [True, False])
@pytest.mark.parametrize("obs", [("float32", (4,)), ("uint8", (84, 84, 4)), ("float64", ())])
def test_round_trip_is_bit_exact(obs: tuple[str, tuple[int, ...]], behaviour: bool) -> None:
    chunk = make_chunk(obs_dtype=obs[0], obs_shape=obs[1], behaviour=behaviour)
    data = encode_chunk(chunk)
    assert data[:2] == MAGIC
    decoded = decode_chunk(data)
    assert decoded.equals(chunk)
    assert not decoded.observations.flags.writeable  # a zero-copy view over the bytes


def test_nan_and_special_floats_survive() -> None:
    chunk = make_chunk(steps=3)
    rewards = np.array([np.nan, -np.inf, -0.0], dtype=np.float32)
    special = ExperienceChunk(**{**chunk.__dict__, "rewards": rewards})
    assert decode_chunk(encode_chunk(special)).rewards.tobytes() == rewards.tobytes()


def test_big_endian_and_strided_arrays_are_normalised() -> None:
    chunk = make_chunk(steps=4)
    obs = chunk.observations.astype(">f4")[:, ::-1]
    decoded = decode_chunk(encode_chunk(ExperienceChunk(**{**chunk.__dict__, "observations": obs})))
    np.testing.assert_array_equal(decoded.observations, obs)
    assert decoded.observations.dtype == np.float32


def test_empty_chunk_round_trips() -> None:
    chunk = make_chunk(steps=0, ended=False)
    assert decode_chunk(encode_chunk(chunk)).equals(chunk)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"observations": np.zeros((3, 4), np.float32)}, "observations must have 6 rows"),
        ({"rewards": np.zeros(5, np.float64)}, "rewards must be float32"),
        ({"terminated": np.array([1, 0, 0, 0, 0], bool)}, "before the last step"),
        ({"actions": np.zeros(5, dtype=np.complex64)}, "dtype complex64"),
        ({"worker_id": -1}, "worker_id is -1, outside"),
    ],
)
def test_malformed_chunks_are_refused_at_encode(change: dict[str, object], match: str) -> None:
    chunk = ExperienceChunk(**{**make_chunk().__dict__, **change})
    with pytest.raises(EncodeError, match=match):
        encode_chunk(chunk)


def _good() -> bytes:
    return encode_chunk(make_chunk(steps=6))


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "too short"),
        (b"\x00" * 40, "not the Avro single-object marker"),
        (MAGIC + b"\x01" * 8 + b"\x00" * 30, "Unknown schema fingerprint"),
        (_good()[:-7], "Corrupt or truncated"),
        (_good()[: HEADER_SIZE + 3], "Corrupt or truncated"),
        (_good() + b"\x00", "unexpected bytes"),
        (encode_control(PolicyVersion("r", 1, "u", "s", 1, 1, 1, 1)), "expected a io.coachstream"),
    ],
)
def test_hostile_bytes_raise_decode_error(data: bytes, match: str) -> None:
    with pytest.raises(DecodeError, match=match):
        decode_chunk(data)


def _patch_tensor(data: bytes, old: bytes, new: bytes) -> bytes:
    assert data.count(old) >= 1
    return data.replace(old, new, 1)


def _zigzag(n: int) -> bytes:
    value = (n << 1) ^ (n >> 63)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _str(s: str) -> bytes:
    return _zigzag(len(s)) + s.encode()


def test_wrong_dtype_shape_and_bool_bytes_raise_decode_error() -> None:
    good = _good()
    # rewards float32 (6,) -> declared float64: byte count no longer matches
    bad_dtype = _patch_tensor(
        good, _str("float32") + _zigzag(1) + _zigzag(6), _str("float64") + _zigzag(1) + _zigzag(6)
    )
    with pytest.raises(DecodeError, match="declares float64"):
        decode_chunk(bad_dtype)
    unknown = _patch_tensor(good, _str("float32"), _str("floatXX"))
    with pytest.raises(DecodeError, match="unknown dtype"):
        decode_chunk(unknown)
    huge = _patch_tensor(
        good,
        _str("float32") + _zigzag(2) + _zigzag(7) + _zigzag(4),
        _str("float32") + _zigzag(2) + _zigzag(2**40) + _zigzag(2**40),
    )
    with pytest.raises(DecodeError, match="bytes but carries"):
        decode_chunk(huge)
    flags = _str("bool") + _zigzag(1) + _zigzag(6) + b"\x00" + _zigzag(6)
    not_bool = _patch_tensor(
        good, flags + b"\x00" * 5 + b"\x01", flags + b"\x02" + b"\x00" * 4 + b"\x01"
    )
    with pytest.raises(DecodeError, match="other than 0 and 1"):
        decode_chunk(not_bool)


def test_every_truncation_and_bit_flip_raises_typed_errors_only() -> None:
    good = _good()
    for cut in range(len(good)):
        with pytest.raises(DecodeError):
            decode_chunk(good[:cut])
    rng = np.random.default_rng(1)
    for _ in range(300):
        data = bytearray(good)
        pos = int(rng.integers(HEADER_SIZE, len(data)))
        data[pos] ^= 1 << int(rng.integers(0, 8))
        try:
            decoded = decode_chunk(bytes(data))
        except DecodeError:
            continue
        # A flip inside array data is still valid Avro; what decodes must be a chunk the
        # encoder accepts (all checks held) and that round-trips unchanged.
        assert decode_chunk(encode_chunk(decoded)).equals(decoded)


def test_control_decoder_refuses_chunks() -> None:
    with pytest.raises(DecodeError, match=r"expected a io\.coachstream\.ControlMessage"):
        decode_control(_good())


def test_struct_sanity_of_header() -> None:
    data = _good()
    (fingerprint,) = struct.unpack("<Q", data[2:HEADER_SIZE])
    assert fingerprint != 0
