"""``core.ControlMessage`` <-> Avro ``io.coachstream.ControlMessage`` single-object bytes.

The union branch travels by record name (fastavro's tuple notation), so adding a message
type is adding a branch at the end of the union in a new schema version.

Anyone who can write to the control topic can put valid Avro there that no trainer or
evaluator would write: a negative size, an empty uri, a sha256 that no hash can match, a
return of NaN. ``decode`` refuses those with a ``DecodeError`` (what the control subscriber
counts and skips), so every consumer of a decoded message can rely on its fields. Encoding
does not check them: a message built by coach_stream already holds, and the fault drills
encode hostile ones on purpose.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from coach_stream.addresses import parse_address
from coach_stream.codec.avro import SingleObjectCodec
from coach_stream.codec.registry import SchemaRegistry, SchemaVersion
from coach_stream.core import (
    ControlMessage,
    EvaluationReport,
    PolicyVersion,
    RunFinished,
    TrainerRendezvous,
)
from coach_stream.errors import ConfigError, DecodeError, EncodeError
from coach_stream.runids import check_run_id

CONTROL_SCHEMA = "io.coachstream.ControlMessage"
_TYPES: dict[str, type[ControlMessage]] = {
    "io.coachstream.PolicyVersion": PolicyVersion,
    "io.coachstream.RunFinished": RunFinished,
    "io.coachstream.EvaluationReport": EvaluationReport,
    "io.coachstream.TrainerRendezvous": TrainerRendezvous,
}
_NAMES = {cls: name for name, cls in _TYPES.items()}
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _problem(message: ControlMessage) -> str | None:
    """What makes ``message`` one no coach_stream writer produces, or None."""
    try:
        check_run_id(message.run_id)
    except ConfigError:
        return f"run id {message.run_id[:120]!r} is one no run can have"
    if isinstance(message, PolicyVersion):
        if not _SHA256.fullmatch(message.sha256):
            return f"sha256 {message.sha256[:80]!r} is not 64 lowercase hex digits"
        if not message.uri:
            return "uri is empty"
        counters = [
            ("version", message.version, 0),
            ("size", message.size, 0),
            ("trainer_step", message.trainer_step, 0),
            ("env_steps", message.env_steps, 0),
        ]
    elif isinstance(message, RunFinished):
        if not message.reason:
            return "reason is empty"
        counters = [("final_version", message.final_version, -1)]  # -1: none was announced
    elif isinstance(message, TrainerRendezvous):
        try:
            parse_address(message.address)
        except ConfigError:
            return f"address {message.address[:80]!r} is not HOST:PORT"
        counters = [("world", message.world, 2)]
    else:
        if not all(math.isfinite(value) for value in message.returns):
            return "returns hold NaN or infinity"
        counters = [
            ("policy_version", message.policy_version, 0),
            ("env_steps", message.env_steps, 0),
        ]
    for name, value, minimum in counters:
        if value < minimum:
            return f"{name} is {value}, below {minimum}"
    return None


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
                "RunFinished, EvaluationReport or TrainerRendezvous."
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
            message = cls(**fields)
        except TypeError as exc:
            raise DecodeError(f"Control message {name} has unexpected fields ({exc}).") from exc
        problem = _problem(message)
        if problem is not None:
            raise DecodeError(
                f"{cls.__name__} is not one coach_stream writes: {problem}; it was forged "
                "or corrupted, so it is skipped."
            )
        return message
