"""The Parquet export's encodings: dictionaries only where values repeat, data unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from coach_stream.codec import encode_chunk
from coach_stream.codec.columns import from_chunks
from coach_stream.replay.batches import ChunkBatch
from coach_stream.replay.export.parquet import ParquetExporter
from coach_stream.testing.chunks import make_chunk


def _batch() -> ChunkBatch:
    chunks = [make_chunk(16, seed=i, ended=i == 2, behaviour=True) for i in range(3)]
    n = len(chunks)
    return ChunkBatch(
        from_chunks(chunks),
        np.zeros(n, np.int32),
        np.arange(n, dtype=np.int64),
        np.full(n, 1_700_000_000_000, np.int64),
        [b""] * n,
        [encode_chunk(c) for c in chunks],
        [],
    )


def test_observations_and_behaviour_columns_get_no_dictionary(tmp_path: Path) -> None:
    batch = _batch()
    exporter = ParquetExporter(tmp_path / "t.parquet", {})
    exporter.write(batch)
    exporter.close()
    meta = pq.ParquetFile(tmp_path / "t.parquet").metadata.row_group(0)
    encodings = {
        meta.column(i).path_in_schema.split(".")[0]: meta.column(i).encodings
        for i in range(meta.num_columns)
    }
    for name in ("observation", "next_observation", "log_prob", "value", "episode_return"):
        assert "RLE_DICTIONARY" not in encodings[name], name
    for name in ("worker_id", "policy_version", "action", "reward"):
        assert "RLE_DICTIONARY" in encodings[name], name
    table = pq.read_table(tmp_path / "t.parquet")
    observations = np.stack(table.column("observation").to_numpy(zero_copy_only=False))
    c = batch.columns
    acted_in = np.concatenate(  # each chunk's rows but its last (the next observation)
        [c.observations[s : s + t] for s, t in zip(_obs_starts(c.steps), c.steps, strict=True)]
    )
    assert np.array_equal(observations, acted_in.reshape(len(acted_in), -1))
    assert np.array_equal(table.column("reward").to_numpy(), c.rewards)


def _obs_starts(steps: np.ndarray) -> list[int]:
    """Where each chunk's T + 1 observation rows begin in the column."""
    return (np.cumsum(steps + 1) - (steps + 1)).tolist()
