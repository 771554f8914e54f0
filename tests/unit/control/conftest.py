"""Fixtures: an in-memory control log and store, and small state_dict blobs."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from coach_stream.checkpoints import policy_to_bytes
from coach_stream.testing.memory_control import (
    MemoryControlLog,
    MemoryControlPublisher,
    MemoryControlSubscriber,
)
from coach_stream.testing.memory_store import MemoryCheckpointStore


@pytest.fixture
def log() -> MemoryControlLog:
    return MemoryControlLog()


@pytest.fixture
def store() -> MemoryCheckpointStore:
    return MemoryCheckpointStore()


@pytest.fixture
def publisher(log: MemoryControlLog) -> MemoryControlPublisher:
    return MemoryControlPublisher(log)


@pytest.fixture
def subscriber(log: MemoryControlLog) -> MemoryControlSubscriber:
    return MemoryControlSubscriber(log)


@pytest.fixture
def weights() -> Callable[[float], bytes]:
    """Makes a tiny policy whose single tensor identifies the version it came from."""

    def make(value: float) -> bytes:
        return policy_to_bytes({"w": torch.full((4,), value)})

    return make
