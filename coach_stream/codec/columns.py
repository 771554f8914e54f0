"""``ChunkColumns``: many ``ExperienceChunk`` as columns, and the ways to cut and join them.

The vectorized decoder (``codec.columnar``) produces them, the per-record path converts
its chunks with ``from_chunks``, and the replay reader joins and cuts them into batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from coach_stream.core import ExperienceChunk

_I64 = npt.NDArray[np.int64]
_BOOL = npt.NDArray[np.bool_]

PER_CHUNK = (
    "run_ids",
    "worker_id",
    "env_index",
    "chunk_seq",
    "policy_version",
    "first_step",
    "steps",
    "episode_return",
    "episode_length",
    "created_at_ms",
)
"""The fields with one entry per chunk."""
PER_STEP = ("actions", "rewards", "terminated", "truncated")
"""The fields with one row per step (``observations`` has one more per chunk)."""
OPTIONAL = ("log_probs", "values")
"""Per-step fields that a chunk may lack (NaN rows in the columns, None if all lack it)."""


@dataclass(frozen=True)
class ChunkColumns:
    """``n`` chunks as columns: per-chunk fields (length n) and row arrays.

    ``observations`` holds each chunk's T+1 rows back to back; the step arrays hold T rows
    per chunk. ``episode_return`` is NaN and ``episode_length`` -1 where unset;
    ``log_probs``/``values`` are None when no chunk has them, NaN rows for those without.
    """

    run_ids: list[str]
    worker_id: npt.NDArray[np.int32]
    env_index: npt.NDArray[np.int32]
    chunk_seq: _I64
    policy_version: _I64
    first_step: _I64
    steps: _I64
    episode_return: npt.NDArray[np.float64]
    episode_length: _I64
    created_at_ms: _I64
    observations: npt.NDArray[Any]
    actions: npt.NDArray[Any]
    rewards: npt.NDArray[np.float32]
    terminated: _BOOL
    truncated: _BOOL
    log_probs: npt.NDArray[np.float32] | None
    values: npt.NDArray[np.float32] | None

    def __len__(self) -> int:
        return int(self.steps.shape[0])


def _optional(
    columns: list[npt.NDArray[np.float32] | None], steps: list[int]
) -> npt.NDArray[np.float32] | None:
    """Optional step columns joined: NaN rows for the parts without one, None if none has."""
    if all(col is None for col in columns):
        return None
    return np.concatenate(
        [
            np.full(t, np.nan, np.float32) if col is None else col
            for col, t in zip(columns, steps, strict=True)
        ]
    )


def from_chunks(chunks: list[ExperienceChunk]) -> ChunkColumns:
    """Columns of already decoded chunks (the per-record path's results)."""
    n = len(chunks)

    def ints(name: str, dtype: type[np.generic] = np.int64) -> Any:
        return np.fromiter((getattr(c, name) for c in chunks), dtype, n)

    steps = np.fromiter((c.num_steps for c in chunks), np.int64, n)
    return ChunkColumns(
        run_ids=[c.run_id for c in chunks],
        worker_id=ints("worker_id", np.int32),
        env_index=ints("env_index", np.int32),
        chunk_seq=ints("chunk_seq"),
        policy_version=ints("policy_version"),
        first_step=ints("first_step"),
        steps=steps,
        episode_return=np.fromiter(
            (np.nan if c.episode_return is None else c.episode_return for c in chunks),
            np.float64,
            n,
        ),
        episode_length=np.fromiter(
            (-1 if c.episode_length is None else c.episode_length for c in chunks), np.int64, n
        ),
        created_at_ms=ints("created_at_ms"),
        observations=np.concatenate([c.observations for c in chunks]),
        actions=np.concatenate([c.actions for c in chunks]),
        rewards=np.concatenate([c.rewards for c in chunks]),
        terminated=np.concatenate([c.terminated for c in chunks]),
        truncated=np.concatenate([c.truncated for c in chunks]),
        log_probs=_optional([c.log_probs for c in chunks], steps.tolist()),
        values=_optional([c.values for c in chunks], steps.tolist()),
    )


def concat_columns(parts: list[ChunkColumns]) -> ChunkColumns:
    """Parts in order as one ``ChunkColumns`` (NaN-filled where a part lacks an optional)."""
    if len(parts) == 1:
        return parts[0]
    steps = [int(p.steps.sum()) for p in parts]
    fields: dict[str, Any] = {"run_ids": [r for p in parts for r in p.run_ids]}
    for name in (*PER_CHUNK[1:], "observations", *PER_STEP):
        fields[name] = np.concatenate([getattr(p, name) for p in parts])
    for name in OPTIONAL:
        fields[name] = _optional([getattr(p, name) for p in parts], steps)
    return ChunkColumns(**fields)


def split_columns(columns: ChunkColumns, chunks: int) -> tuple[ChunkColumns, ChunkColumns]:
    """The first ``chunks`` chunks and the rest (views, no copy)."""
    rows = int(columns.steps[:chunks].sum())
    cuts = dict.fromkeys(PER_CHUNK, chunks) | dict.fromkeys((*PER_STEP, *OPTIONAL), rows)
    cuts["observations"] = rows + min(chunks, len(columns.steps))
    head: dict[str, Any] = {}
    tail: dict[str, Any] = {}
    for name, cut in cuts.items():
        value = getattr(columns, name)
        head[name], tail[name] = (None, None) if value is None else (value[:cut], value[cut:])
    return ChunkColumns(**head), ChunkColumns(**tail)


def empty_columns() -> ChunkColumns:
    """No chunks (a batch that held only undecodable records)."""
    i64 = np.zeros(0, dtype=np.int64)
    return ChunkColumns(
        run_ids=[],
        worker_id=np.zeros(0, dtype=np.int32),
        env_index=np.zeros(0, dtype=np.int32),
        chunk_seq=i64,
        policy_version=i64,
        first_step=i64,
        steps=i64,
        episode_return=np.zeros(0),
        episode_length=i64,
        created_at_ms=i64,
        observations=np.zeros((0, 1), dtype=np.float32),
        actions=i64,
        rewards=np.zeros(0, dtype=np.float32),
        terminated=np.zeros(0, dtype=np.bool_),
        truncated=np.zeros(0, dtype=np.bool_),
        log_probs=None,
        values=None,
    )
