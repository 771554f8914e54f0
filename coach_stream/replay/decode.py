"""Records of one read to a ``ChunkBatch``: vectorized, and per record only where needed.

A read's records go through the codec's columnar decoder at once; when some of them are
not plain v1 chunks (an older schema version, garbage, a tombstone) those go through the
per-record codec one by one, in place, so the batch keeps the topic's order. Records that
do not decode are counted and listed as ``Undecodable``: the reader is read-only, it never
dead-letters (the trainer already did).
"""

from __future__ import annotations

import builtins
from collections import Counter
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt
from confluent_kafka import Message

from coach_stream.codec import ChunkCodec
from coach_stream.codec.avro import HEADER_SIZE
from coach_stream.codec.columnar import ColumnarDecoder
from coach_stream.codec.columns import ChunkColumns, concat_columns, from_chunks, split_columns
from coach_stream.codec.fastpath import V1_FINGERPRINT
from coach_stream.core import ExperienceChunk
from coach_stream.errors import DecodeError
from coach_stream.replay.batches import ChunkBatch, Undecodable
from coach_stream.transport.reader import ReadCounts


@dataclass(frozen=True)
class Layout:
    """What every chunk of a replayed range must share to stand in one set of columns: the
    observations' and the actions' shape after the step axis, and their dtypes."""

    observations: tuple[tuple[int, ...], str]
    actions: tuple[tuple[int, ...], str]

    @staticmethod
    def of(observations: npt.NDArray[Any], actions: npt.NDArray[Any]) -> Layout:
        return Layout(
            (observations.shape[1:], observations.dtype.name),
            (actions.shape[1:], actions.dtype.name),
        )

    def refusal(self, other: Layout) -> str:
        """Why a chunk of layout ``other`` is left out of this range's columns."""
        return (
            f"Chunk of {other.describe()} in a range of {self.describe()}; replay one run's "
            "range at a time (--from/--to)."
        )

    def describe(self) -> str:
        (obs_shape, obs_dtype), (act_shape, act_dtype) = self.observations, self.actions
        return f"observations {obs_shape} {obs_dtype} and actions {act_shape} {act_dtype}"


@dataclass
class ReaderStats(ReadCounts):
    """What one pass read: ``ReadCounts`` (``bytes``: of the chunks), and the following."""

    transitions: int = 0
    undecodable: int = 0
    """Records that are not chunks (garbage, an unknown schema, a tombstone) or not of the
    range's layout (``Layout``): skipped."""
    schemas: Counter[builtins.bytes] = field(default_factory=Counter)
    """Chunks per writer-schema fingerprint."""
    max_held_records: int = 0
    """The most records the reader held at once (bounded by a batch; tests check it)."""


def decode_records(
    messages: list[Message],
    codec: ChunkCodec,
    stats: ReaderStats,
    layout: Layout | None = None,
    columnar: ColumnarDecoder | None = None,
) -> ChunkBatch | None:
    """One read's records (one partition's) as a ChunkBatch; None if there were none.

    ``layout``: the range's, from its first read of chunks (None: this read sets it, by its
    vectorized chunks, else by its first). Chunks of another layout cannot share the range's
    columns: they are undecodable here, with the reason. ``columnar``: the reader's, kept
    from read to read (None: a new one).
    """
    values = [v or b"" for v in map(Message.value, messages)]
    columns, ok = (columnar or ColumnarDecoder()).decode(values)
    if columns is not None:
        found = Layout.of(columns.observations, columns.actions)
        if layout is None:
            layout = found
        elif found != layout:  # each record to the codec, which tells them apart
            columns, ok = None, np.zeros(len(values), dtype=np.bool_)
    vectorized = columns is not None and bool(ok.all())
    bad: list[Undecodable] = []
    if vectorized and columns is not None:
        parts, kept = [columns], list(range(len(messages)))
    else:
        parts, kept, bad = _decode_mixed(messages, values, columns, ok, codec, layout)
    stats.undecodable += len(bad)
    if not kept:
        return ChunkBatch.only_undecodable(bad) if bad else None
    if len(kept) == len(messages):  # the common case: no per-record copies
        chosen, kept_values = messages, values
    else:
        chosen, kept_values = [messages[i] for i in kept], [values[i] for i in kept]
    if vectorized:  # the vectorized decoder accepts v1 records only
        fingerprints = [V1_FINGERPRINT] * len(kept_values)
        stats.schemas[V1_FINGERPRINT] += len(kept_values)
    else:
        fingerprints = [v[2:HEADER_SIZE] for v in kept_values]
        stats.schemas.update(fingerprints)
    stats.bytes += sum(map(len, kept_values))
    n = len(chosen)
    # one read holds one partition's records (they are read one after the other)
    partition = chosen[0].partition() or 0
    return ChunkBatch(
        concat_columns(parts),
        np.full(n, partition, dtype=np.int32),
        _offsets(chosen),
        np.fromiter(map(itemgetter(1), map(Message.timestamp, chosen)), np.int64, n),
        fingerprints,
        kept_values,
        bad,
    )


def _offsets(messages: list[Message]) -> npt.NDArray[np.int64]:
    """The records' offsets: one partition's only grow, so when the last is n - 1 past the
    first they are every offset between (the usual read; a compacted or transactional
    topic has gaps, and each record is asked)."""
    first, last, n = messages[0].offset() or 0, messages[-1].offset() or 0, len(messages)
    if last - first == n - 1:
        return np.arange(first, last + 1, dtype=np.int64)
    return np.fromiter(map(Message.offset, messages), np.int64, n)


def _decode_mixed(
    messages: list[Message],
    values: list[bytes],
    columns: ChunkColumns | None,
    ok: npt.NDArray[np.bool_],
    codec: ChunkCodec,
    layout: Layout | None,
) -> tuple[list[ChunkColumns], list[int], list[Undecodable]]:
    """The columnar decoder's chunks where ``ok``, the codec's elsewhere, in record order:
    (column parts, indices of the records that are chunks, the records that are not).
    A chunk the codec decodes but whose layout is not ``layout`` is one that is not."""
    parts: list[ChunkColumns] = []
    kept: list[int] = []
    bad: list[Undecodable] = []
    fast_at = 0  # next chunk of ``columns`` not yet placed
    run: list[ExperienceChunk] = []
    for i, message in enumerate(messages):
        if ok[i] and columns is not None:
            if run:
                parts.append(from_chunks(run))
                run = []
            head, _ = split_columns(columns, fast_at + 1)
            parts.append(split_columns(head, fast_at)[1])
            fast_at += 1
            kept.append(i)
            continue
        try:
            if message.value() is None:
                raise DecodeError("Record has no value (a tombstone).")
            chunk = codec.decode(values[i])
            found = Layout.of(chunk.observations, chunk.actions)
            layout = layout or found
            if found != layout:
                raise DecodeError(layout.refusal(found))
            run.append(chunk)
            kept.append(i)
        except DecodeError as exc:
            bad.append(Undecodable(message.partition() or 0, message.offset() or 0, str(exc)))
    if run:
        parts.append(from_chunks(run))
    return parts, kept, bad
