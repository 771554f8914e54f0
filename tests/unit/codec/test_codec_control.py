"""Control codec: every message type round-trips and is told apart by its union branch."""

from __future__ import annotations

import pytest

from coach_stream.codec import decode_control, encode_control
from coach_stream.core import ControlMessage, EvaluationReport, PolicyVersion, RunFinished
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
    ],
)
def test_round_trip(message: ControlMessage) -> None:
    decoded = decode_control(encode_control(message))
    assert type(decoded) is type(message)
    assert decoded == message


def test_non_control_object_is_refused() -> None:
    with pytest.raises(
        EncodeError, match="str is not a control message; send a PolicyVersion, RunFinished or Eval"
    ):
        encode_control("hello")  # type: ignore[arg-type]


def test_garbage_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        decode_control(b"\xc3\x01garbage!")
