"""Avro object container files, readable by any Avro tool, the writer schema embedded.

One record per chunk, exactly the topic's ``ExperienceChunk`` records: a record already
written with the file's schema (the newest registered one) is copied byte for byte (the
single-object header dropped); one written with another version is resolved to it through
the registry and re-encoded. One container block per batch. File metadata also names the
source topic (``coach_stream.topic``) and range (``coach_stream.range``).
"""

from __future__ import annotations

import hashlib
import io
import json
import zlib
from pathlib import Path
from typing import BinaryIO

import fastavro

from coach_stream.codec import SchemaRegistry, SingleObjectCodec
from coach_stream.codec.avro import HEADER_SIZE
from coach_stream.codec.chunks import CHUNK_SCHEMA
from coach_stream.codec.fastpath import string, varint
from coach_stream.replay.batches import ChunkBatch

MAGIC = b"Obj\x01"


def _bytes(data: bytes) -> bytes:
    return varint(len(data)) + data


class AvroExporter:
    """``path``: the ``.avro`` file to create; ``codec``: ``null`` or ``deflate``."""

    def __init__(
        self,
        path: Path,
        registry: SchemaRegistry,
        metadata: dict[str, str],
        codec: str = "null",
    ) -> None:
        self.schema = registry.latest(CHUNK_SCHEMA)
        self._resolve = SingleObjectCodec(registry, self.schema)
        self._codec = codec
        # a sync marker derived from the content's origin: the same export, the same bytes
        self._sync = hashlib.sha256(json.dumps(metadata, sort_keys=True).encode()).digest()[:16]
        self._file: BinaryIO = path.open("wb")
        meta = {
            "avro.schema": json.dumps(self.schema.schema).encode(),
            "avro.codec": codec.encode(),
            **{k: v.encode() for k, v in metadata.items()},
        }
        header = [MAGIC, varint(len(meta))]
        for key, value in meta.items():
            header += [string(key), _bytes(value)]
        header += [varint(0), self._sync]
        self._file.write(b"".join(header))
        self.records = 0
        self.reencoded = 0

    def write(self, batch: ChunkBatch) -> None:
        if not len(batch):
            return
        mine = self.schema.fingerprint
        bodies = []
        for value, fingerprint in zip(batch.values, batch.fingerprints, strict=True):
            if fingerprint == mine:
                bodies.append(memoryview(value)[HEADER_SIZE:])
            else:  # another schema version: resolve to the file's schema, then encode
                out = io.BytesIO()
                fastavro.schemaless_writer(out, self.schema.parsed, self._resolve.decode(value))
                bodies.append(memoryview(out.getvalue()))
                self.reencoded += 1
        data = b"".join(bodies)
        if self._codec == "deflate":
            packer = zlib.compressobj(6, zlib.DEFLATED, -15)
            data = packer.compress(data) + packer.flush()
        self._file.write(varint(len(bodies)) + varint(len(data)) + data + self._sync)
        self.records += len(bodies)

    def close(self) -> dict[str, int]:
        self._file.close()
        return {"records": self.records, "reencoded": self.reencoded}
