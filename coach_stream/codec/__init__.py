"""The wire codec: core records <-> Avro single-object encoded bytes.

``encode_chunk``/``decode_chunk`` and ``encode_control``/``decode_control`` use the schemas
shipped in ``schemas/`` (loaded once, on first use). Decoding raises
``coach_stream.errors.DecodeError`` for anything that is not a valid, consistent record;
encoding raises ``coach_stream.errors.EncodeError`` for a malformed value. Decoded arrays
are read-only ``numpy.frombuffer`` views: copy them if you need to write.
"""

from __future__ import annotations

import functools

from coach_stream.codec.avro import SingleObjectCodec
from coach_stream.codec.chunks import ChunkCodec, ChunkSpec, check_chunk
from coach_stream.codec.control import ControlCodec
from coach_stream.codec.registry import SchemaRegistry, SchemaVersion, default_schema_dir
from coach_stream.core import ControlMessage, ExperienceChunk

__all__ = [
    "ChunkCodec",
    "ChunkSpec",
    "ControlCodec",
    "SchemaRegistry",
    "SchemaVersion",
    "SingleObjectCodec",
    "check_chunk",
    "chunk_schema",
    "decode_chunk",
    "decode_control",
    "default_registry",
    "default_schema_dir",
    "encode_chunk",
    "encode_control",
]


@functools.cache
def default_registry() -> SchemaRegistry:
    """The packaged schemas, parsed once per process."""
    return SchemaRegistry.load()


@functools.cache
def _chunk_codec() -> ChunkCodec:
    return ChunkCodec(default_registry())


@functools.cache
def _control_codec() -> ControlCodec:
    return ControlCodec(default_registry())


def chunk_schema() -> SchemaVersion:
    """The ExperienceChunk schema ``encode_chunk`` writes (the newest registered)."""
    return _chunk_codec().schema


def encode_chunk(chunk: ExperienceChunk) -> bytes:
    """Single-object Avro bytes of ``chunk`` (raises EncodeError if it is malformed)."""
    return _chunk_codec().encode(chunk)


def decode_chunk(data: bytes) -> ExperienceChunk:
    """The chunk in ``data`` (raises DecodeError for anything else)."""
    return _chunk_codec().decode(data)


def encode_control(message: ControlMessage) -> bytes:
    """Single-object Avro bytes of a PolicyVersion, RunFinished or EvaluationReport."""
    return _control_codec().encode(message)


def decode_control(data: bytes) -> ControlMessage:
    """The control message in ``data`` (raises DecodeError for anything else)."""
    return _control_codec().decode(data)
