"""``ExperienceChunk`` v1 records written straight from a chunker's columns, in one numba call.

On CartPole a rollout worker emits about one chunk every 13 env steps (its untrained
episodes are short), and each chunk cost more than an env step's own CPU: the chunk's
columns copied out of the chunker (six arrays and a dataclass), its invariants checked,
its v1 bytes joined from some twenty parts (``fastpath.ChunkWriterV1``). Here the records
of every chunk a vector step finishes are written into one buffer by one compiled call,
from the chunker's rows as they lie: the same bytes as ``ChunkWriterV1`` (a property test
compares them), with the invariants holding by construction (every column has the chunk's
rows, the flags are the chunker's own) and the integer fields checked against their wire
limits here.

Columns travel as byte rows (``.view(np.uint8)``), so one compiled signature serves every
observation and action dtype and shape.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from coach_stream.codec.avro import MAGIC
from coach_stream.codec.chunks import FIELD_LIMITS
from coach_stream.codec.fastpath import V1_FINGERPRINT, string
from coach_stream.codec.tensors import DTYPES, MAX_NDIM
from coach_stream.errors import EncodeError

HEADER = MAGIC + V1_FINGERPRINT
"""Single-object marker and the v1 schema's fingerprint: what every record here starts with."""

COLUMNS = ("observations", "actions", "rewards", "terminated", "truncated", "log_probs")
"""The columns ``encode_records`` writes, in wire order; ``values``, the next field, is
always empty (no worker computes value estimates: ``core.Action``)."""
META_FIELDS = tuple(FIELD_LIMITS)
"""The integer fields in wire order, as the columns of ``encode_records``'s ``meta``."""
META_LIMITS = np.array(list(FIELD_LIMITS.values()), dtype=np.uint64)
"""Each field of ``META_FIELDS`` is in ``0..limit - 1``."""
_FIXED_BYTES = 1024
"""Per record, more than everything but the prefix and the column data can take (numba
does not check bounds, so this is a bound, not an estimate): five metadata varints (10
bytes each at most), six tensor heads (a name of at most 8 bytes, a count, up to 8 dims
of 10 bytes, the end, a length: at most 100), the optional fields (21) and the time (10)."""

_ONE_AT_A_TIME = 1 << 18
"""Records larger than this (256 KiB: frames) are written and copied out one at a time."""

_SEVEN_BITS, _HIGH_BIT, _SHIFT = np.uint64(0x7F), np.uint64(0x80), np.uint64(7)


@numba.njit(inline="always", cache=True)
def _varint(out: Any, pos: int, n: Any) -> int:
    """Avro ``long`` of ``n >= 0`` at ``out[pos]`` (zig-zag: 2n; base-128); the next pos."""
    z = np.uint64(n) + np.uint64(n)
    while z > _SEVEN_BITS:
        out[pos] = np.uint8((z & _SEVEN_BITS) | _HIGH_BIT)
        z >>= _SHIFT
        pos += 1
    out[pos] = np.uint8(z)
    return pos + 1


@numba.njit(inline="always", cache=True)
def _head(out: Any, pos: int, name: Any, rows: int, dims: Any, row_bytes: int) -> int:
    """A tensor's dtype name, shape (rows, *dims) and data length; the next pos."""
    pos = _varint(out, _copy(out, pos, name, 0, name.size), dims.size + 1)
    pos = _varint(out, pos, rows)
    for d in dims:
        pos = _varint(out, pos, d)
    out[pos] = 0  # the shape array's end
    return _varint(out, pos + 1, rows * row_bytes)


@numba.njit(inline="always", cache=True)
def _copy(out: Any, pos: int, source: Any, start: int, size: int) -> int:
    """``source[start:start + size]`` at ``out[pos]``, byte by byte (LLVM makes it a
    memcpy; a slice assignment per row cost ~40 ns of checks on CartPole's 16-byte rows)."""
    target, origin = out[pos : pos + size], source[start : start + size]
    for j in range(size):  # indices numba knows are >= 0: no wraparound checks, a memcpy
        target[j] = origin[j]
    return pos + size


@numba.njit(cache=True)
def encode_records(
    out: Any, prefix: Any, meta: Any, columns: Any, widths: Any, names: Any, dims: Any,
    starts: Any, rows: Any, bootstrap: Any, behaviour: bool, ended: Any, returns: Any,
    created_ms: int,
) -> Any:  # fmt: skip
    """Write record k (v1 body after ``prefix``) for each chunk k; the records' bounds.

    ``meta``: (k, 5) int64 in ``META_FIELDS`` order; ``columns``: the six columns
    (observations, actions, rewards, terminated, truncated, log-probs), each its
    bytes in one row-major run, ``widths`` bytes a row; ``names``: each one's encoded
    dtype name; ``dims``: each one's row shape. Chunk k is ``rows[k]`` rows from
    ``starts[k]``, then row k of ``bootstrap`` (bytes, one observation row each) closes its
    observations; ``returns`` (float64 bytes) are written where ``ended[k]``.
    Returns (k + 1) offsets into ``out``, or, where a field is outside its wire limit,
    ``-1 - (its index in META_FIELDS)`` in the first place.
    """
    k = starts.shape[0]
    offsets = np.zeros(k + 1, dtype=np.int64)
    for c in range(k):
        for f in range(5):
            if meta[c, f] < 0 or np.uint64(meta[c, f]) >= META_LIMITS[f]:
                offsets[0] = -1 - f
                return offsets
    pos = 0
    for c in range(k):
        n = rows[c]
        pos = _copy(out, pos, prefix, 0, prefix.size)
        for f in range(5):
            pos = _varint(out, pos, meta[c, f])
        width = widths[0]
        pos = _head(out, pos, names[0], n + 1, dims[0], width)
        pos = _copy(out, pos, columns[0], starts[c] * width, n * width)
        pos = _copy(out, pos, bootstrap, c * width, width)
        for j in range(1, 6):
            if j == 5:  # log-probs: a union of null and a tensor
                if not behaviour:
                    out[pos] = 0
                    pos += 1
                    continue
                out[pos] = 2
                pos += 1
            width = widths[j]
            pos = _head(out, pos, names[j], n, dims[j], width)
            pos = _copy(out, pos, columns[j], starts[c] * width, n * width)
        out[pos] = 0  # values: null
        pos += 1
        if ended[c]:
            out[pos] = 2
            _copy(out, pos + 1, returns, 8 * c, 8)
            out[pos + 9] = 2  # episode_length's union branch, then the episode's length
            pos = _varint(out, pos + 10, meta[c, 4] + n)
        else:
            out[pos : pos + 2] = 0
            pos += 2
        pos = _varint(out, pos, created_ms)
        offsets[c + 1] = pos
    return offsets


@dataclass(frozen=True)
class ColumnLayout:
    """What ``encode_records`` needs of one column besides its rows: its dtype's encoded
    name and its row shape."""

    name: npt.NDArray[np.uint8]
    dims: npt.NDArray[np.int64]

    @classmethod
    def of(cls, dtype: np.dtype[Any], row_shape: tuple[int, ...], field: str) -> ColumnLayout:
        wire = np.dtype(dtype).newbyteorder("<")
        names = {d: name for name, d in DTYPES.items()}
        if wire not in names or np.dtype(dtype) != wire:
            raise EncodeError(
                f"Field {field} has dtype {dtype}, which the wire format does not carry in "
                f"this byte order; use one of {', '.join(DTYPES)} (little-endian)."
            )
        if len(row_shape) + 1 > MAX_NDIM:
            raise EncodeError(f"Field {field} has {len(row_shape) + 1} dimensions; at most "
                              f"{MAX_NDIM} travel.")  # fmt: skip
        return cls(np.frombuffer(string(names[wire]), np.uint8), np.array(row_shape, np.int64))


class RecordWriter:
    """v1 records of one run's chunks, written from one chunker's columns (``encode_records``).

    ``columns``: the chunker's six columns (``encode_records``), each (rows, *row shape)
    and C-contiguous; they are read where they lie, at every ``write``.
    """

    def __init__(self, run_id: str, columns: tuple[npt.NDArray[Any], ...]) -> None:
        layouts = [
            ColumnLayout.of(c.dtype, c.shape[1:], field)
            for c, field in zip(columns, COLUMNS, strict=True)
        ]
        if not all(c.flags.c_contiguous for c in columns):
            raise ValueError("RecordWriter reads its columns where they lie: C-contiguous only")
        self.prefix = np.frombuffer(HEADER + string(run_id), np.uint8)
        self.names = tuple(layout.name for layout in layouts)
        self.dims = tuple(layout.dims for layout in layouts)
        self.columns = tuple(c.reshape(-1).view(np.uint8) for c in columns)  # views: contiguous
        self.widths = np.array(
            [c.itemsize * int(np.prod(c.shape[1:], dtype=np.int64)) for c in columns], np.int64
        )
        self._row_bytes = int(self.widths.sum())
        self._out = np.zeros(0, np.uint8)

    def write(
        self, meta: npt.NDArray[np.int64], starts: npt.NDArray[np.int64],
        rows: npt.NDArray[np.int64], bootstrap: npt.NDArray[Any], behaviour: bool,
        ended: npt.NDArray[np.bool_], returns: npt.NDArray[np.float64], created_ms: int,
    ) -> list[bytes]:  # fmt: skip
        """Each chunk's record, in order (``encode_records``); ``bootstrap``: (k, *obs shape)
        in the observations' dtype, C-contiguous.

        Records of more than ``_ONE_AT_A_TIME`` bytes are written one call each, each copied
        out while it is still in the cache: eight Pong records written at once (29 MB) and
        then copied out cost 1.2x the chunks emitted and encoded one by one."""
        k = int(starts.shape[0])
        bootstrap_bytes = bootstrap.reshape(k, -1).view(np.uint8)
        returns_bytes = returns.view(np.uint8).reshape(k, 8)
        batch = k if int(rows.max()) * self._row_bytes <= _ONE_AT_A_TIME else 1
        records: list[bytes] = []
        for first in range(0, k, batch):
            part = slice(first, first + batch)
            records += self._write(meta[part], starts[part], rows[part],
                                   bootstrap_bytes[part], behaviour, ended[part],
                                   returns_bytes[part], created_ms)  # fmt: skip
        return records

    def _write(
        self, meta: Any, starts: Any, rows: Any, bootstrap: Any, behaviour: bool, ended: Any,
        returns: Any, created_ms: int,
    ) -> list[bytes]:  # fmt: skip
        k = int(starts.shape[0])
        need = k * (self.prefix.size + _FIXED_BYTES + self._row_bytes) + int(rows.sum()) * (
            self._row_bytes
        )
        if self._out.size < need:
            self._out = np.zeros(max(need, 2 * self._out.size), np.uint8)
        out = self._out
        offsets = encode_records(
            out, self.prefix, meta, self.columns, self.widths, self.names, self.dims, starts,
            rows, bootstrap.reshape(-1), behaviour, ended, returns.reshape(-1), created_ms,
        )  # fmt: skip
        if offsets[0] < 0:
            index = -1 - int(offsets[0])
            bad = meta[:, index]
            raise EncodeError(
                f"{META_FIELDS[index]} is {int(bad.max()) if bad.min() >= 0 else int(bad.min())}"
                f", outside 0..{int(META_LIMITS[index]) - 1} (its wire limit)."
            )
        bounds = offsets.tolist()
        return [out[a:b].tobytes() for a, b in itertools.pairwise(bounds)]


def warm_up() -> None:
    """Compile (or load) ``encode_records``'s one signature: the one chunkers call it with."""
    columns = tuple(np.zeros((4, 2), np.float32) for _ in COLUMNS)
    writer = RecordWriter("warm-up", columns)
    one = np.ones(1, np.int64)
    writer.write(np.zeros((1, 5), np.int64), one, one, np.zeros((1, 2), np.float32), True,
                 np.ones(1, np.bool_), np.zeros(1, np.float64), 0)  # fmt: skip
