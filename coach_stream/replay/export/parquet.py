"""Parquet through pyarrow: one row per transition, typed columns, one row group per batch.

Columns (``docs/replay.md`` has the table): Kafka position (``partition``, ``offset``,
``timestamp``), the chunk's ``worker_id``/``env_index``/``chunk_seq``/``policy_version``,
``episode_id`` (the ``chunk_seq`` the episode's first chunk had; -1 if it began before the
range) and ``step`` in the episode, ``observation`` and ``next_observation`` as fixed-size
lists of the flattened observation (shape and dtype in the file's metadata), ``action``,
``reward``, ``terminated``, ``truncated``, nullable ``log_prob``/``value``, and
``episode_return``/``episode_length`` on an episode's last row (null elsewhere).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from coach_stream.replay.batches import ChunkBatch, to_transitions

_CONTINUOUS = frozenset({"log_prob", "value", "episode_return"})
"""Scalar float columns whose values are nearly all distinct: no dictionary (see below)."""


def _fixed(values: np.ndarray[Any, Any]) -> pa.FixedSizeListArray:
    flat = np.ascontiguousarray(values).reshape(len(values), -1)
    width = flat.shape[1]
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), width)


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns worth a dictionary: the scalar ones with few distinct values.

    Observations (and continuous actions, and log-probs and values) are nearly all distinct:
    pyarrow fills a dictionary page with them before it falls back to plain pages, work
    thrown away that also leaves larger pages. Writing the 327,680 CartPole transitions of
    ``bench/replay.py --quick``'s topic took 3.1x as long and made a file 1.6x as large with
    a dictionary on every column (0.96 against 3.02 M rows/s, 14.5 against 9.2 MiB); uint8
    frames wrote 1.4x as fast without it, for 8 % more bytes.
    """
    return [
        field.name
        for field in schema
        if field.name not in _CONTINUOUS and not pa.types.is_fixed_size_list(field.type)
    ]


def _nullable(values: np.ndarray[Any, Any] | None, length: int, kind: pa.DataType) -> pa.Array:
    if values is None:
        return pa.nulls(length, kind)
    return pa.array(values, kind, mask=np.isnan(values))


class EpisodeIds:
    """Per ``(worker_id, env_index)``: the ``chunk_seq`` of the open episode's first chunk."""

    def __init__(self) -> None:
        self._open: dict[tuple[int, int], int] = {}

    def of_chunks(self, batch: ChunkBatch) -> np.ndarray[Any, np.dtype[np.int64]]:
        c = batch.columns
        out = np.empty(len(c), dtype=np.int64)
        rows = zip(
            c.worker_id.tolist(),
            c.env_index.tolist(),
            c.chunk_seq.tolist(),
            c.first_step.tolist(),
            _ends(batch).tolist(),
            strict=True,
        )
        for i, (worker, env, seq, first_step, ends) in enumerate(rows):
            key = (worker, env)
            if first_step == 0:
                self._open[key] = seq
            out[i] = self._open.get(key, -1)
            if ends:
                self._open.pop(key, None)
        return out


def _ends(batch: ChunkBatch) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Whether each chunk ends its episode (its last step is terminated or truncated)."""
    c = batch.columns
    last = np.cumsum(c.steps) - 1
    has = c.steps > 0
    out = np.zeros(len(c), dtype=np.bool_)
    out[has] = c.terminated[last[has]] | c.truncated[last[has]]
    return out


class ParquetExporter:
    def __init__(self, path: Path, metadata: dict[str, str], compression: str = "zstd") -> None:
        self.path, self.metadata, self.compression = path, metadata, compression
        self._writer: pq.ParquetWriter | None = None
        self._episodes = EpisodeIds()
        self.rows = 0

    def _schema(self, batch: ChunkBatch) -> pa.Schema:
        obs = batch.columns.observations
        return pa.schema([]).with_metadata(
            {
                **self.metadata,
                "coach_stream.observation_shape": json.dumps(list(obs.shape[1:])),
                "coach_stream.observation_dtype": obs.dtype.name,
            }
        )

    def write(self, batch: ChunkBatch) -> None:
        if not len(batch):
            return
        t = to_transitions(batch)
        n = len(t)
        episode = np.repeat(self._episodes.of_chunks(batch), batch.columns.steps)
        actions = t.actions if t.actions.ndim == 1 else _fixed(t.actions)
        table = pa.table(
            {
                "partition": pa.array(t.partition, pa.int32()),
                "offset": pa.array(t.offset, pa.int64()),
                "timestamp": pa.array(t.timestamp_ms, pa.int64()).cast(pa.timestamp("ms", "UTC")),
                "worker_id": pa.array(t.worker_id, pa.int32()),
                "env_index": pa.array(t.env_index, pa.int32()),
                "chunk_seq": pa.array(t.chunk_seq, pa.int64()),
                "policy_version": pa.array(t.policy_version, pa.int64()),
                "episode_id": pa.array(episode, pa.int64()),
                "step": pa.array(t.step, pa.int64()),
                "observation": _fixed(t.observations),
                "next_observation": _fixed(t.next_observations),
                "action": actions,
                "reward": pa.array(t.rewards, pa.float32()),
                "terminated": pa.array(t.terminated, pa.bool_()),
                "truncated": pa.array(t.truncated, pa.bool_()),
                "log_prob": _nullable(t.log_probs, n, pa.float32()),
                "value": _nullable(t.values, n, pa.float32()),
                "episode_return": _nullable(t.episode_return, n, pa.float64()),
                "episode_length": pa.array(t.episode_length, pa.int64(), mask=t.episode_length < 0),
            }
        )
        if self._writer is None:
            metadata = self._schema(batch).metadata
            self._writer = pq.ParquetWriter(
                self.path,
                table.schema.with_metadata(metadata),
                compression=self.compression,
                use_dictionary=dictionary_columns(table.schema),
            )
        self._writer.write_table(table.replace_schema_metadata(self._writer.schema.metadata))
        self.rows += n

    def close(self) -> dict[str, int]:
        if self._writer is not None:
            self._writer.close()
        return {"rows": self.rows}
