"""Weights-only serialization: tensors round-trip; pickled code and junk are refused."""

from __future__ import annotations

import io
import pickle

import pytest
import torch

from coach_stream.checkpoints import policy_from_bytes, policy_to_bytes
from coach_stream.errors import IntegrityError


class Evil:
    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (print, ("pwned",))


def test_state_dict_round_trips() -> None:
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    loaded = policy_from_bytes(policy_to_bytes(net.state_dict()))
    assert set(loaded) == set(net.state_dict())
    for name, tensor in net.state_dict().items():
        assert torch.equal(loaded[name], tensor)  # type: ignore[arg-type]


def test_arbitrary_pickles_are_refused() -> None:
    buffer = io.BytesIO()
    torch.save({"w": Evil()}, buffer)
    with pytest.raises(IntegrityError, match="weights-only"):
        policy_from_bytes(buffer.getvalue())


@pytest.mark.parametrize("blob", [b"", b"not a torch file", pickle.dumps({"a": 1})])
def test_junk_is_an_integrity_error(blob: bytes) -> None:
    with pytest.raises(IntegrityError):
        policy_from_bytes(blob)


def test_non_mapping_payload_is_refused() -> None:
    buffer = io.BytesIO()
    torch.save([torch.zeros(2)], buffer)
    with pytest.raises(IntegrityError, match="not a state_dict"):
        policy_from_bytes(buffer.getvalue())
