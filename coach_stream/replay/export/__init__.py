"""Exports of a topic range: Avro object container files, Parquet, a Minari dataset.

Each exporter takes the reader's batches one at a time and writes them out before the
next is read, so memory is bounded by a batch whatever the topic's size. ``export`` picks
the exporter by format and handles the destination (a local path, or ``gs://`` through a
local staging directory uploaded when the export is complete).
"""

from __future__ import annotations

from typing import Protocol

from coach_stream.replay.batches import ChunkBatch


class Exporter(Protocol):
    def write(self, batch: ChunkBatch) -> None:
        """Write one batch of chunks (in read order)."""

    def close(self) -> dict[str, int]:
        """Finish the output; counts of what was written (records, rows, episodes...)."""


FORMATS = ("avro", "parquet", "minari")
