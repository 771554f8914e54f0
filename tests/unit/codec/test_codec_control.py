"""Control codec: every message type round-trips and is told apart by its union branch."""

from __future__ import annotations

import pytest

from coach_stream.codec import SingleObjectCodec, decode_control, default_registry, encode_control
from coach_stream.codec.control import CONTROL_SCHEMA
from coach_stream.core import (
    ControlMessage,
    EvaluationReport,
    PolicyVersion,
    RunFinished,
    TrainerRendezvous,
)
from coach_stream.errors import DecodeError, EncodeError


@pytest.mark.parametrize(
    "message",
    [
        PolicyVersion(
            "run-1",
            7,
            "gs://b/runs/run-1/policies/00000007.pt",
            "ab" * 32,
            1234,
            700,
            70_000,
            1_700_000_000_000,
        ),
        RunFinished("run-1", 9, "target_reached", 1_700_000_000_001),
        EvaluationReport("run-1", 9, 90_000, (200.0, 187.5, -1.25), 1_700_000_000_002),
        EvaluationReport("run-1", 9, 90_000, (), 5),
        TrainerRendezvous("run-1", "10.0.3.7:24011", 2, 1_700_000_000_003),
        TrainerRendezvous("run-1", "[fd00::7]:24011", 4, 6),
    ],
)
def test_round_trip(message: ControlMessage) -> None:
    decoded = decode_control(encode_control(message))
    assert type(decoded) is type(message)
    assert decoded == message


def test_non_control_object_is_refused() -> None:
    with pytest.raises(
        EncodeError, match="str is not a control message; send a PolicyVersion, RunFinished, Eval"
    ):
        encode_control("hello")  # type: ignore[arg-type]


def test_garbage_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        decode_control(b"\xc3\x01garbage!")


def _record(kind: str, **fields: object) -> bytes:
    """Valid Avro of a control message, whatever its values (what a forger can write)."""
    registry = default_registry()
    codec = SingleObjectCodec(registry, registry.latest(CONTROL_SCHEMA), return_record_name=True)
    return codec.encode({"message": (f"io.coachstream.{kind}", fields)})


_POLICY = {
    "run_id": "run-1",
    "version": 3,
    "uri": "gs://b/runs/run-1/policies/00000003.pt",
    "sha256": "ab" * 32,
    "size": 10,
    "trainer_step": 1,
    "env_steps": 2,
    "created_at_ms": 0,
}
_FINISHED = {"run_id": "run-1", "final_version": -1, "reason": "stopped", "created_at_ms": 0}
_RENDEZVOUS = {"run_id": "run-1", "address": "10.0.3.7:24011", "world": 2, "created_at_ms": 0}
_EVALUATION = {
    "run_id": "run-1",
    "policy_version": 0,
    "env_steps": 0,
    "returns": [1.0],
    "created_at_ms": 0,
}


def test_the_least_a_writer_can_send_decodes() -> None:
    assert decode_control(_record("PolicyVersion", **_POLICY)).version == 3
    assert decode_control(_record("RunFinished", **_FINISHED)).final_version == -1
    assert decode_control(_record("EvaluationReport", **_EVALUATION)).returns == (1.0,)
    assert decode_control(_record("TrainerRendezvous", **_RENDEZVOUS)).world == 2


# Found by tests/fuzz: these decoded, and each consumer had to guard against them itself.
@pytest.mark.parametrize(
    ("kind", "fields", "match"),
    [
        ("PolicyVersion", {**_POLICY, "sha256": "AB" * 32}, "sha256 'ABAB.*' is not 64 lowercase"),
        ("PolicyVersion", {**_POLICY, "sha256": ""}, "sha256 '' is not 64 lowercase hex"),
        ("PolicyVersion", {**_POLICY, "uri": ""}, "uri is empty"),
        ("PolicyVersion", {**_POLICY, "version": -1}, "version is -1, below 0"),
        ("PolicyVersion", {**_POLICY, "size": -(2**63)}, "size is -9223372036854775808, below 0"),
        ("PolicyVersion", {**_POLICY, "trainer_step": -1}, "trainer_step is -1, below 0"),
        ("PolicyVersion", {**_POLICY, "env_steps": -1}, "env_steps is -1, below 0"),
        ("PolicyVersion", {**_POLICY, "run_id": ""}, "run id '' is one no run can have"),
        ("RunFinished", {**_FINISHED, "run_id": "../x"}, r"run id '\.\./x' is one no run"),
        ("RunFinished", {**_FINISHED, "final_version": -2}, "final_version is -2, below -1"),
        ("RunFinished", {**_FINISHED, "reason": ""}, "reason is empty"),
        ("EvaluationReport", {**_EVALUATION, "returns": [1.0, float("nan")]}, "returns hold NaN"),
        ("EvaluationReport", {**_EVALUATION, "returns": [float("inf")]}, "returns hold NaN or inf"),
        ("EvaluationReport", {**_EVALUATION, "policy_version": -5}, "policy_version is -5"),
        ("EvaluationReport", {**_EVALUATION, "env_steps": -5}, "env_steps is -5, below 0"),
        ("TrainerRendezvous", {**_RENDEZVOUS, "address": ""}, "address '' is not HOST:PORT"),
        ("TrainerRendezvous", {**_RENDEZVOUS, "address": "h:0"}, "address 'h:0' is not HOST:P"),
        ("TrainerRendezvous", {**_RENDEZVOUS, "address": "h:99999"}, "address 'h:99999' is not"),
        ("TrainerRendezvous", {**_RENDEZVOUS, "address": "a b:1"}, "address 'a b:1' is not"),
        ("TrainerRendezvous", {**_RENDEZVOUS, "world": 1}, "world is 1, below 2"),
    ],
)
def test_values_no_writer_produces_are_a_decode_error(
    kind: str, fields: dict[str, object], match: str
) -> None:
    with pytest.raises(DecodeError, match=f"^{kind} is not one coach_stream writes: {match}"):
        decode_control(_record(kind, **fields))


def test_messages_written_with_v1_still_decode_after_v2_added_trainer_rendezvous() -> None:
    """Control topics are kept forever: what a v1 trainer wrote must read back."""
    registry = default_registry()
    v1 = registry.get(CONTROL_SCHEMA, 1)
    assert registry.latest(CONTROL_SCHEMA).version == 2
    data = SingleObjectCodec(registry, v1, return_record_name=True).encode(
        {"message": ("io.coachstream.PolicyVersion", _POLICY)}
    )
    assert data[2:10] == v1.fingerprint
    assert decode_control(data) == PolicyVersion(**_POLICY)  # type: ignore[arg-type]
