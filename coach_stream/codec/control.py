"""``core.ControlMessage`` <-> Avro ``io.coachstream.ControlMessage`` single-object bytes.

The union branch travels by record name (fastavro's tuple notation), so adding a message
type is adding a branch at the end of the union in a new schema version.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from coach_stream.codec.avro import SingleObjectCodec
from coach_stream.codec.registry import SchemaRegistry, SchemaVersion
from coach_stream.core import ControlMessage, EvaluationReport, PolicyVersion, RunFinished
from coach_stream.errors import DecodeError, EncodeError

CONTROL_SCHEMA = "io.coachstream.ControlMessage"
_TYPES: dict[str, type[PolicyVersion] | type[RunFinished] | type[EvaluationReport]] = {
    "io.coachstream.PolicyVersion": PolicyVersion,
    "io.coachstream.RunFinished": RunFinished,
    "io.coachstream.EvaluationReport": EvaluationReport,
}
_NAMES = {cls: name for name, cls in _TYPES.items()}


class ControlCodec:
    """Encodes with the newest ControlMessage schema; decodes every registered version."""

    def __init__(
        self, registry: SchemaRegistry | None = None, reader: SchemaVersion | None = None
    ) -> None:
        registry = registry or SchemaRegistry.load()
        self._codec = SingleObjectCodec(
            registry, reader or registry.latest(CONTROL_SCHEMA), return_record_name=True
        )

    def encode(self, message: ControlMessage) -> bytes:
        name = _NAMES.get(type(message))
        if name is None:
            raise EncodeError(
                f"{type(message).__name__} is not a control message; send a PolicyVersion, "
                "RunFinished or EvaluationReport."
            )
        body = dataclasses.asdict(message)
        if isinstance(message, EvaluationReport):
            body["returns"] = list(message.returns)
        return self._codec.encode({"message": (name, body)})

    def decode(self, data: bytes) -> ControlMessage:
        record = self._codec.decode(data)
        branch = record["message"]
        if not (isinstance(branch, tuple) and len(branch) == 2):
            raise DecodeError("ControlMessage union did not decode to a named branch.")
        name, body = branch
        cls = _TYPES.get(name)
        if cls is None:
            raise DecodeError(f"Unknown control message type {name}; upgrade coach_stream.")
        fields: dict[str, Any] = dict(body)
        if cls is EvaluationReport:
            fields["returns"] = tuple(fields["returns"])
        try:
            return cls(**fields)
        except TypeError as exc:
            raise DecodeError(f"Control message {name} has unexpected fields ({exc}).") from exc
