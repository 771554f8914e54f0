"""The fast reader's dimension limit is the codec's: 8 dimensions decode, 9 are declined.

Declining hands the record to the fastavro path, which refuses 9 (``DecodeError``); so the
limit must be exact on both sides, or a record would be accepted here that the reference
path refuses (the two surviving mutants of the mutation check, docs/testing.md)."""

from __future__ import annotations

import numpy as np
import pytest

from coach_stream.codec.fastpath import ChunkReaderV1, UnusualRecordError
from coach_stream.codec.tensors import MAX_NDIM


def _long(value: int) -> bytes:
    """Avro's zigzag varint."""
    n, out = (value << 1) ^ (value >> 63), bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _tensor(ndim: int) -> bytes:
    """An Avro ``Tensor``: dtype string, shape array (one block of 1s), data bytes."""
    data = np.arange(1, dtype=np.float32).tobytes()
    shape = _long(ndim) + b"".join(_long(1) for _ in range(ndim)) + _long(0)
    return _long(len(b"float32")) + b"float32" + shape + _long(len(data)) + data


def test_a_tensor_of_max_ndim_dimensions_decodes_on_the_fast_path() -> None:
    array, end = ChunkReaderV1()._tensor(_tensor(MAX_NDIM), 0)
    assert array.ndim == MAX_NDIM == 8 and end == len(_tensor(MAX_NDIM))


@pytest.mark.parametrize("ndim", [MAX_NDIM + 1, MAX_NDIM + 5])
def test_more_dimensions_are_declined(ndim: int) -> None:
    with pytest.raises(UnusualRecordError, match="shape block"):
        ChunkReaderV1()._tensor(_tensor(ndim), 0)
