"""Hand-written Avro binary writer and reader for ``ExperienceChunk`` v1: the hot paths.

fastavro copies every byte string several times while it grows its output buffer, and
builds a dict per nested record; for Atari-size chunks (~1 MB) encoding was the producer's
bottleneck and per-record overhead the consumer's. The writer emits the same bytes as
fastavro (a property test checks it) with one copy of the array data: the arrays' buffers
go straight into a single ``bytes.join``. The reader makes every array a read-only
``numpy.frombuffer`` view into the record's own bytes, with no copy at all.

Both implement exactly the v1 layout. The reader is only an accelerator: on anything
unusual (truncation, bad UTF-8, a negative block count, a size mismatch) it gives up and
``ChunkCodec`` decodes with fastavro, which produces the definitive ``DecodeError``; a
property test checks that whenever the fast reader succeeds, fastavro agrees.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt

from coach_stream.codec.avro import AVRO_INT_LIMIT, AVRO_LONG_LIMIT
from coach_stream.codec.tensors import DTYPES, MAX_NDIM
from coach_stream.core import ExperienceChunk
from coach_stream.errors import EncodeError

V1_FINGERPRINT = bytes.fromhex("780ae3cbb3850a02")
"""The schema whose field order this module writes (``ExperienceChunk.v1.avsc``)."""

_SMALL = [bytes([n << 1]) for n in range(64)]  # zig-zag of 0..63 is one byte
_NULL, _SECOND_BRANCH = b"\x00", b"\x02"
_DOUBLE = struct.Struct("<d").pack
_NAMES = {dtype: name for name, dtype in DTYPES.items()} | {
    dtype.newbyteorder(">"): name for name, dtype in DTYPES.items() if dtype.itemsize > 1
}
_INT64 = (-AVRO_LONG_LIMIT, AVRO_LONG_LIMIT - 1)


def varint(n: int) -> bytes:
    """Avro ``long``: zig-zag, then little-endian base-128."""
    if 0 <= n < 64:
        return _SMALL[n]
    if not _INT64[0] <= n <= _INT64[1]:
        raise EncodeError(f"{n} does not fit in an Avro long (64-bit); use a smaller value.")
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def string(text: str) -> bytes:
    data = text.encode("utf-8")
    return varint(len(data)) + data


class ChunkWriterV1:
    """Encodes chunks as ``header + v1 body`` (``header`` = single-object marker + fingerprint)."""

    _MAX_CACHED = 4096

    def __init__(self, header: bytes) -> None:
        self._header = header
        self._heads: dict[tuple[np.dtype[Any], tuple[int, ...]], bytes] = {}
        self._run_ids: dict[str, bytes] = {}

    def _tensor(self, parts: list[Any], array: npt.NDArray[Any], field: str) -> None:
        if not isinstance(array, np.ndarray):
            raise EncodeError(
                f"Field {field} is a {type(array).__name__}, not a numpy array; pass "
                "np.asarray(...)."
            )
        key = (array.dtype, array.shape)
        head = self._heads.get(key)
        if head is None:
            name = _NAMES.get(array.dtype)
            if name is None:
                raise EncodeError(
                    f"Field {field} has dtype {array.dtype}, which the wire format does not "
                    f"carry; convert it to one of {', '.join(DTYPES)}."
                )
            if array.ndim > MAX_NDIM:
                raise EncodeError(
                    f"Field {field} has {array.ndim} dimensions; at most {MAX_NDIM} travel."
                )
            shape = (
                varint(len(array.shape)) + b"".join(map(varint, array.shape)) + b"\x00"
                if array.shape
                else b"\x00"
            )
            head = string(name) + shape + varint(array.size * array.dtype.itemsize)
            if len(self._heads) >= self._MAX_CACHED:
                self._heads.clear()
            self._heads[key] = head
        if array.dtype.byteorder == ">" or not array.flags.c_contiguous:
            array = np.ascontiguousarray(array, dtype=DTYPES[array.dtype.name])
        parts.append(head)
        parts.append(array)

    def encode(self, chunk: ExperienceChunk) -> bytes:
        run_id = self._run_ids.get(chunk.run_id)
        if run_id is None:
            run_id = string(chunk.run_id)
            if len(self._run_ids) < self._MAX_CACHED:
                self._run_ids[chunk.run_id] = run_id
        parts: list[Any] = [
            self._header,
            run_id,
            varint(chunk.worker_id),
            varint(chunk.env_index),
            varint(chunk.chunk_seq),
            varint(chunk.policy_version),
            varint(chunk.first_step),
        ]
        tensor = self._tensor
        tensor(parts, chunk.observations, "observations")
        tensor(parts, chunk.actions, "actions")
        tensor(parts, chunk.rewards, "rewards")
        tensor(parts, chunk.terminated, "terminated")
        tensor(parts, chunk.truncated, "truncated")
        for name, optional in (("log_probs", chunk.log_probs), ("values", chunk.values)):
            if optional is None:
                parts.append(_NULL)
            else:
                parts.append(_SECOND_BRANCH)
                tensor(parts, optional, name)
        if chunk.episode_return is None:
            parts.append(_NULL)
        else:
            parts.append(_SECOND_BRANCH + _DOUBLE(float(chunk.episode_return)))
        if chunk.episode_length is None:
            parts.append(_NULL)
        else:
            parts.append(_SECOND_BRANCH + varint(chunk.episode_length))
        parts.append(varint(chunk.created_at_ms))
        return b"".join(parts)


class UnusualRecordError(Exception):
    """The fast reader declines the record; the fastavro path will decide."""


_DTYPE_BY_NAME = {name.encode(): dtype for name, dtype in DTYPES.items()}
_UNPACK_DOUBLE = struct.Struct("<d").unpack_from


def _long(buf: bytes, pos: int) -> tuple[int, int]:
    byte = buf[pos]
    pos += 1
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos
    value, shift = byte & 0x7F, 7
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value >> 64:  # a 10th byte above 1: no long; fastavro wraps it, so it decides
                raise UnusualRecordError("varint beyond 64 bits")
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 63:
            raise UnusualRecordError("varint longer than 10 bytes")


class ChunkReaderV1:
    """Decodes a v1 body (after the 10-byte header) into a chunk of zero-copy array views."""

    def _tensor(self, buf: bytes, pos: int) -> tuple[npt.NDArray[Any], int]:
        size, pos = _long(buf, pos)
        dtype = _DTYPE_BY_NAME.get(buf[pos : pos + size])
        if dtype is None or size < 0:
            raise UnusualRecordError("dtype")
        pos += size
        shape: list[int] = []
        count, pos = _long(buf, pos)
        while count:
            if count < 0 or len(shape) + count > MAX_NDIM:
                raise UnusualRecordError("shape block")
            for _ in range(count):
                dim, pos = _long(buf, pos)
                shape.append(dim)
            count, pos = _long(buf, pos)
        nbytes, pos = _long(buf, pos)
        elements = 1
        for dim in shape:
            if dim < 0:
                raise UnusualRecordError("negative dimension")
            elements *= dim
        if nbytes != elements * dtype.itemsize or pos + nbytes > len(buf):
            raise UnusualRecordError("size")
        array = np.frombuffer(buf, dtype, elements, pos).reshape(shape)
        if dtype.kind == "b" and elements and int(array.view(np.uint8).max()) > 1:
            raise UnusualRecordError("bool")
        return array, pos + nbytes

    def _optional_tensor(self, buf: bytes, pos: int) -> tuple[npt.NDArray[Any] | None, int]:
        branch, pos = _long(buf, pos)
        if branch == 0:
            return None, pos
        if branch != 1:
            raise UnusualRecordError("union branch")
        return self._tensor(buf, pos)

    def decode(self, buf: bytes) -> ExperienceChunk:
        size, pos = _long(buf, 10)
        if size < 0 or pos + size > len(buf):
            raise UnusualRecordError("run_id")
        run_id = buf[pos : pos + size].decode("utf-8")
        pos += size
        worker_id, pos = _long(buf, pos)
        env_index, pos = _long(buf, pos)
        chunk_seq, pos = _long(buf, pos)
        policy_version, pos = _long(buf, pos)
        first_step, pos = _long(buf, pos)
        observations, pos = self._tensor(buf, pos)
        actions, pos = self._tensor(buf, pos)
        rewards, pos = self._tensor(buf, pos)
        terminated, pos = self._tensor(buf, pos)
        truncated, pos = self._tensor(buf, pos)
        log_probs, pos = self._optional_tensor(buf, pos)
        values, pos = self._optional_tensor(buf, pos)
        branch, pos = _long(buf, pos)
        episode_return: float | None = None
        if branch == 1:
            if pos + 8 > len(buf):
                raise UnusualRecordError("double")
            (episode_return,) = _UNPACK_DOUBLE(buf, pos)
            pos += 8
        elif branch != 0:
            raise UnusualRecordError("union branch")
        branch, pos = _long(buf, pos)
        episode_length: int | None = None
        if branch == 1:
            episode_length, pos = _long(buf, pos)
        elif branch != 0:
            raise UnusualRecordError("union branch")
        created_at_ms, pos = _long(buf, pos)
        avro_int = range(-AVRO_INT_LIMIT, AVRO_INT_LIMIT)
        if pos != len(buf) or worker_id not in avro_int or env_index not in avro_int:
            raise UnusualRecordError("trailing bytes or int range")
        return ExperienceChunk(
            run_id=run_id,
            worker_id=worker_id,
            env_index=env_index,
            chunk_seq=chunk_seq,
            policy_version=policy_version,
            first_step=first_step,
            observations=observations,
            actions=actions,
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            log_probs=log_probs,
            values=values,
            episode_return=episode_return,
            episode_length=episode_length,
            created_at_ms=created_at_ms,
        )
