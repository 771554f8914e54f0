"""Avro single-object encoding: ``C3 01`` + 8-byte CRC-64-AVRO fingerprint + binary body.

The fingerprint lets a reader find the exact writer schema in the registry and resolve it
against its own (newer or older) reader schema, so old topics stay readable. Anything that
is not a valid record of a known schema raises ``DecodeError``: never a crash, a hang or a
silently wrong value.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import fastavro

from coach_stream.codec.registry import SchemaRegistry, SchemaVersion
from coach_stream.errors import DecodeError, EncodeError

MAGIC = b"\xc3\x01"
HEADER_SIZE = 10
AVRO_INT_LIMIT = 2**31
"""Avro ``int`` is 32-bit: ``-AVRO_INT_LIMIT <= n < AVRO_INT_LIMIT``."""
AVRO_LONG_LIMIT = 2**63
"""Avro ``long`` is 64-bit."""


class SingleObjectCodec:
    """Encode with one reader schema; decode any registered version of the same record."""

    def __init__(
        self,
        registry: SchemaRegistry,
        reader: SchemaVersion,
        *,
        return_record_name: bool = False,
    ) -> None:
        self.registry = registry
        self.reader = reader
        self._header = MAGIC + reader.fingerprint
        self._return_record_name = return_record_name

    def encode(self, datum: Mapping[str, Any]) -> bytes:
        buf = io.BytesIO()
        buf.write(self._header)
        try:
            fastavro.schemaless_writer(buf, self.reader.parsed, datum)
        except Exception as exc:  # fastavro raises ValueError/TypeError/KeyError/...
            raise EncodeError(
                f"Cannot encode a {self.reader.full_name}: {type(exc).__name__}: {exc}; "
                "fix the value's fields or types."
            ) from exc
        return buf.getvalue()

    def writer_schema(self, data: bytes) -> SchemaVersion:
        """The registered schema the record's header names (checked against ours)."""
        if len(data) < HEADER_SIZE:
            raise DecodeError(
                f"Record of {len(data)} bytes is too short for an Avro single-object header."
            )
        if data[:2] != MAGIC:
            raise DecodeError(
                f"Record starts with {bytes(data[:2]).hex()}, not the Avro single-object "
                "marker c301; it was not written by coach_stream's codec."
            )
        writer = self.registry.by_fingerprint(data[2:HEADER_SIZE])
        if writer is None:
            raise DecodeError(
                f"Unknown schema fingerprint {bytes(data[2:HEADER_SIZE]).hex()}; the writer "
                "used a schema this reader does not have (upgrade coach_stream)."
            )
        if writer.full_name != self.reader.full_name:
            raise DecodeError(
                f"Record is a {writer.full_name}, expected a {self.reader.full_name}; "
                "it was written to the wrong topic."
            )
        return writer

    def decode(self, data: bytes) -> Any:
        writer = self.writer_schema(data)
        fo = io.BytesIO(data)  # shares the bytes buffer: no copy
        fo.seek(HEADER_SIZE)
        reader_schema = None if writer is self.reader else self.reader.parsed
        try:
            datum = fastavro.schemaless_reader(
                fo,
                writer.parsed,
                reader_schema,
                return_record_name=self._return_record_name,
                return_record_name_override=True,
            )
        except Exception as exc:  # EOFError, UnicodeDecodeError, SchemaResolutionError, ...
            raise DecodeError(
                f"Corrupt or truncated {writer.full_name} v{writer.version} record "
                f"({type(exc).__name__}: {exc})."
            ) from exc
        if fo.tell() != len(data):
            raise DecodeError(
                f"{len(data) - fo.tell()} unexpected bytes after a {writer.full_name} record; "
                "it is corrupt."
            )
        return datum
