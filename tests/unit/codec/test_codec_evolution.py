"""Schema evolution both ways, pinned fingerprints, and standard Avro (Apache reference impl)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import avro.io
import avro.schema
import pytest

from coach_stream.codec import (
    ChunkCodec,
    SchemaRegistry,
    SingleObjectCodec,
    default_schema_dir,
    encode_chunk,
)
from coach_stream.codec.avro import HEADER_SIZE, MAGIC
from coach_stream.codec.chunks import CHUNK_SCHEMA
from coach_stream.errors import ConfigError, DecodeError
from coach_stream.testing.chunks import make_chunk

FIXTURES = Path(__file__).parent / "fixtures"

# Released schemas never change: a new field means a new file (<Name>.v<N+1>.avsc), so the
# fingerprints already on topics keep resolving. Add a line here when a version is released.
RELEASED = {
    ("io.coachstream.ControlMessage", 1): "16e729559eebb560",
    ("io.coachstream.ControlMessage", 2): "061cecc34d3d1587",
    ("io.coachstream.EvaluationReport", 1): "f18e154bfc7da155",
    ("io.coachstream.ExperienceChunk", 1): "780ae3cbb3850a02",
    ("io.coachstream.PolicyVersion", 1): "29b330bdd2fba9a0",
    ("io.coachstream.RunFinished", 1): "fbc34d3d6c46efdd",
    ("io.coachstream.TelemetryEvent", 1): "7ffd745df9235323",
    ("io.coachstream.Tensor", 1): "2b492cfac620b956",
    ("io.coachstream.TrainerRendezvous", 1): "1bf2ef485fce3aae",
}


@pytest.fixture(scope="module")
def with_v2() -> SchemaRegistry:
    return SchemaRegistry.load(default_schema_dir(), FIXTURES)


def test_old_writer_new_reader_fills_the_default(with_v2: SchemaRegistry) -> None:
    chunk = make_chunk()
    data = encode_chunk(chunk)  # v1 bytes
    v2 = with_v2.latest(CHUNK_SCHEMA)
    assert v2.version == 2
    record = SingleObjectCodec(with_v2, v2).decode(data)
    assert record["env_name"] == "unknown"
    assert ChunkCodec(with_v2).decode(data).equals(chunk)


def test_new_writer_old_reader_ignores_the_new_field(with_v2: SchemaRegistry) -> None:
    chunk = make_chunk()
    v1 = with_v2.get(CHUNK_SCHEMA, 1)
    v2_bytes = ChunkCodec(with_v2).encode(chunk)  # the newest (v2) schema writes
    assert v2_bytes[2:HEADER_SIZE] == with_v2.latest(CHUNK_SCHEMA).fingerprint
    record = SingleObjectCodec(with_v2, with_v2.latest(CHUNK_SCHEMA)).decode(v2_bytes)
    assert record["env_name"] == "unknown"
    v2_record = {**record, "env_name": "CartPole-v1"}
    written = SingleObjectCodec(with_v2, with_v2.latest(CHUNK_SCHEMA)).encode(v2_record)
    assert ChunkCodec(with_v2, reader=v1).decode(written).equals(chunk)


def test_a_reader_without_the_new_schema_reports_an_unknown_fingerprint(
    with_v2: SchemaRegistry,
) -> None:
    v2_bytes = ChunkCodec(with_v2).encode(make_chunk())
    with pytest.raises(DecodeError, match="Unknown schema fingerprint"):
        ChunkCodec().decode(v2_bytes)


def test_fingerprints_are_the_apache_reference_fingerprints() -> None:
    for entry in SchemaRegistry.load():
        reference = avro.schema.parse(json.dumps(entry.schema))
        assert reference.fingerprint("CRC-64-AVRO") == entry.fingerprint, entry


def test_released_fingerprints_never_change() -> None:
    registry = SchemaRegistry.load()
    assert {(e.full_name, e.version): e.fingerprint.hex() for e in registry} == RELEASED


def test_every_schema_and_field_is_documented() -> None:
    for entry in SchemaRegistry.load():
        assert entry.schema.get("doc"), entry
        for field in entry.schema["fields"]:
            assert field.get("doc"), (entry, field["name"])


def test_bytes_are_standard_avro_for_the_reference_implementation() -> None:
    chunk = make_chunk(steps=3)
    data = encode_chunk(chunk)
    entry = SchemaRegistry.load().latest(CHUNK_SCHEMA)
    reference = avro.schema.parse(json.dumps(entry.schema))
    assert data[:2] == MAGIC and data[2:HEADER_SIZE] == reference.fingerprint("CRC-64-AVRO")
    decoder = avro.io.BinaryDecoder(io.BytesIO(data[HEADER_SIZE:]))
    record: Any = avro.io.DatumReader(reference).read(decoder)
    assert record["observations"]["data"] == chunk.observations.tobytes()
    assert record["chunk_seq"] == chunk.chunk_seq and record["episode_return"] == 12.5


def test_misnamed_and_invalid_files_are_config_errors(tmp_path: Path) -> None:
    (tmp_path / "Thing.avsc").write_text("{}")
    with pytest.raises(ConfigError, match=r"not named <Name>\.v<N>\.avsc"):
        SchemaRegistry.load(tmp_path)
    (tmp_path / "Thing.avsc").unlink()
    (tmp_path / "Thing.v1.avsc").write_text(
        json.dumps({"type": "record", "name": "Thing", "fields": [{"name": "a", "type": "Nope"}]})
    )
    with pytest.raises(ConfigError, match="'Nope' is not defined"):
        SchemaRegistry.load(tmp_path)
