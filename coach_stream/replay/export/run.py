"""One export: the reader's batches into the chosen exporter, then to the destination."""

from __future__ import annotations

import shutil
from pathlib import Path

from coach_stream.errors import ConfigError
from coach_stream.replay.export import Exporter
from coach_stream.replay.export.destination import Destination
from coach_stream.replay.reader import ReplayReader


def run_export(
    reader: ReplayReader,
    format: str,
    out: str,
    gcs_emulator: str | None = None,
    *,
    env: str | None = None,
    dataset_id: str | None = None,
) -> tuple[str, dict[str, int]]:
    """Export ``reader``'s range (open) as ``format`` to ``out``; (address, counts)."""
    topic = reader.topic
    base = topic.removesuffix(".experience").rsplit(".", 1)[-1]
    names = {"avro": f"{base}.avro", "parquet": f"{base}.parquet", "minari": "minari"}
    if format not in names:
        raise ConfigError(f"Unknown export format {format!r}; use avro, parquet or minari.")
    destination = Destination(out, names[format], gcs_emulator, directory=format == "minari")
    metadata = {
        "coach_stream.topic": topic,
        "coach_stream.range": ";".join(f"{s.partition}:{s.start}-{s.end}" for s in reader.spans),
    }
    dataset_id = dataset_id or f"coach-stream/{base}-v0"
    # A Minari export writes into a directory in place: what it creates is removed again
    # unless it finishes (a refused --env, Ctrl-C, a failed upload).
    made = _first_missing(destination.local / dataset_id) if format == "minari" else None
    try:
        exporter = _exporter(format, destination.local, reader, metadata, env, dataset_id)
        for batch in reader.chunk_batches():
            exporter.write(batch)
        counts = exporter.close()
        if reader.stats.chunks == 0:
            raise ConfigError(
                f"The range of {topic} holds no decodable chunk ({reader.stats.undecodable} "
                "undecodable records); nothing to export."
            )
        where = destination.finish()
    except BaseException:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise
    finally:
        destination.cleanup()
    counts = {**counts, "chunks": reader.stats.chunks, "transitions": reader.stats.transitions}
    counts["undecodable"] = reader.stats.undecodable
    return where, counts


def _exporter(
    format: str,
    path: Path,
    reader: ReplayReader,
    metadata: dict[str, str],
    env: str | None,
    dataset_id: str,
) -> Exporter:
    if format == "avro":
        from coach_stream.replay.export.avro import AvroExporter

        return AvroExporter(path, reader.registry, metadata)
    if format == "parquet":
        from coach_stream.replay.export.parquet import ParquetExporter

        return ParquetExporter(path, metadata)
    from coach_stream.replay.export.minari import MinariExporter

    return MinariExporter(path, dataset_id, env, f"Exported from {metadata}")


def _first_missing(path: Path) -> Path | None:
    """The outermost directory of ``path`` (itself included) that does not exist yet."""
    path = path.absolute()
    if path.exists():
        return None
    while not path.parent.exists():
        path = path.parent
    return path
