"""Announcer: store, verify, then announce; strictly increasing; outages announce nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from coach_stream.checkpoints import LocalCheckpointStore, policy_key, sha256_hex
from coach_stream.control import Announcer
from coach_stream.core import PolicyVersion, RunFinished
from coach_stream.errors import (
    AlreadyExistsError,
    ConfigError,
    DeliveryError,
    IntegrityError,
    StoreUnavailableError,
)
from coach_stream.testing.memory_control import (
    MemoryControlLog,
    MemoryControlPublisher,
)
from coach_stream.testing.memory_store import MemoryCheckpointStore

Weights = Callable[[float], bytes]


def announced(log: MemoryControlLog) -> list[PolicyVersion]:
    return [m for m in log.messages if isinstance(m, PolicyVersion)]


def test_publish_writes_then_announces(
    weights: Weights,
    store: MemoryCheckpointStore,
    publisher: MemoryControlPublisher,
    log: MemoryControlLog,
) -> None:
    announcer = Announcer(store, publisher, "r1", keep_last=3, clock=lambda: 12.5)
    blob = weights(1.0)
    message = announcer.publish_policy(blob, trainer_step=10, env_steps=2048)
    assert message == PolicyVersion(
        run_id="r1",
        version=0,
        uri=store.uri(policy_key("r1", 0)),
        sha256=sha256_hex(blob),
        size=len(blob),
        trainer_step=10,
        env_steps=2048,
        created_at_ms=12500,
    )
    assert log.messages == [message]
    assert store.objects[policy_key("r1", 0)] == blob
    assert store.gets == 1  # read back before announcing


def test_versions_strictly_increase_and_retention_keeps_k(
    weights: Weights,
    store: MemoryCheckpointStore,
    publisher: MemoryControlPublisher,
    log: MemoryControlLog,
) -> None:
    announcer = Announcer(store, publisher, "r1", keep_last=3)
    for i in range(7):
        announcer.publish_policy(weights(i), trainer_step=i, env_steps=i)
    assert [m.version for m in announced(log)] == list(range(7))
    assert sorted(store.objects) == [policy_key("r1", v) for v in (4, 5, 6)]


def test_store_outage_announces_nothing_and_burns_the_number(
    weights: Weights,
    store: MemoryCheckpointStore,
    publisher: MemoryControlPublisher,
    log: MemoryControlLog,
) -> None:
    announcer = Announcer(store, publisher, "r1", keep_last=2)
    announcer.publish_policy(weights(0), 0, 0)
    store.outage = True
    with pytest.raises(StoreUnavailableError):
        announcer.publish_policy(weights(1), 1, 1)
    store.outage = False
    after = announcer.publish_policy(weights(2), 2, 2)
    assert [m.version for m in announced(log)] == [0, 2]
    assert after.version == 2
    for message in announced(log):  # every announcement points at a stored, matching object
        assert sha256_hex(store.get(message.uri)) == message.sha256


def test_failed_verification_announces_nothing(
    weights: Weights,
    store: MemoryCheckpointStore,
    publisher: MemoryControlPublisher,
    log: MemoryControlLog,
) -> None:
    store.fail_gets = True  # written, but the read-back fails
    announcer = Announcer(store, publisher, "r1")
    with pytest.raises(StoreUnavailableError):
        announcer.publish_policy(weights(0), 0, 0)
    assert log.messages == []


def test_truncating_store_is_caught_by_the_read_back(
    weights: Weights, publisher: MemoryControlPublisher, log: MemoryControlLog
) -> None:
    class Truncating(MemoryCheckpointStore):
        def get(self, uri: str, expected_sha256: str | None = None) -> bytes:
            return super().get(uri)[:-1]

    with pytest.raises(IntegrityError, match="truncated"):
        Announcer(Truncating(), publisher, "r1").publish_policy(weights(0), 0, 0)
    assert log.messages == []


def test_broker_failure_surfaces(
    weights: Weights, store: MemoryCheckpointStore, log: MemoryControlLog
) -> None:
    log.unavailable = True
    with pytest.raises(DeliveryError):
        Announcer(store, MemoryControlPublisher(log), "r1").publish_policy(weights(0), 0, 0)


def test_a_restarted_trainer_continues_numbering(
    weights: Weights,
    store: MemoryCheckpointStore,
    publisher: MemoryControlPublisher,
    log: MemoryControlLog,
) -> None:
    first = Announcer(store, publisher, "r1", keep_last=10)
    for i in range(3):
        first.publish_policy(weights(i), i, i)
    store.put(policy_key("r1", 3), b"orphan of a crash between write and announce")
    last = first.last_announced  # what a restarted trainer reads back from the topic
    assert last is not None and last.version == 2
    second = Announcer(store, publisher, "r1", keep_last=10, last_announced=last)
    assert second.next_version == 4
    assert second.publish_policy(weights(9), 9, 9).version == 4


def test_start_version_is_honoured_and_collisions_refused(
    weights: Weights,
    store: MemoryCheckpointStore,
    publisher: MemoryControlPublisher,
    log: MemoryControlLog,
) -> None:
    store.put(policy_key("r1", 5), b"someone else's")
    announcer = Announcer(store, publisher, "r1", start_version=5)
    with pytest.raises(AlreadyExistsError):
        announcer.publish_policy(weights(0), 0, 0)
    assert log.messages == []
    assert announcer.publish_policy(weights(0), 0, 0).version == 6


def test_finish_announces_the_last_version(
    weights: Weights,
    store: MemoryCheckpointStore,
    publisher: MemoryControlPublisher,
    log: MemoryControlLog,
) -> None:
    announcer = Announcer(store, publisher, "r1", clock=lambda: 1.0)
    assert announcer.finish("stopped").final_version == -1
    announcer.publish_policy(weights(0), 0, 0)
    assert announcer.finish("target_reached") == RunFinished("r1", 0, "target_reached", 1000)
    assert isinstance(log.messages[-1], RunFinished)


def test_trainer_state_goes_next_to_the_policy(
    tmp_path: Path, publisher: MemoryControlPublisher
) -> None:
    store = LocalCheckpointStore(tmp_path)
    stored = Announcer(store, publisher, "r1").save_trainer_state(3, b"state")
    assert stored.uri.endswith("runs/r1/trainer/00000003.pt")
    assert store.get(stored.uri, stored.sha256) == b"state"


def test_invalid_arguments_are_config_errors(
    store: MemoryCheckpointStore, publisher: MemoryControlPublisher
) -> None:
    with pytest.raises(ConfigError):
        Announcer(store, publisher, "r1", keep_last=0)
    with pytest.raises(ConfigError, match="keep_trainer_states=0"):
        Announcer(store, publisher, "r1", keep_trainer_states=0)
    with pytest.raises(ConfigError):
        Announcer(store, publisher, "r1", start_version=-1)


def test_trainer_states_follow_the_same_retention_rule(
    store: MemoryCheckpointStore, publisher: MemoryControlPublisher
) -> None:
    """The newest ``keep_trainer_states`` survive; keys that are not versions are left alone."""
    store.put("runs/r1/trainer/notes.txt", b"not a version")
    announcer = Announcer(store, publisher, "r1", keep_trainer_states=2)
    for version in (0, 1, 3, 7):  # checkpoint_every > 1 leaves gaps between states
        announcer.save_trainer_state(version, f"state {version}".encode())
    assert sorted(k for k in store.objects if "/trainer/" in k) == [
        "runs/r1/trainer/00000003.pt",
        "runs/r1/trainer/00000007.pt",
        "runs/r1/trainer/notes.txt",
    ]


def test_trainer_state_retention_failure_is_not_fatal(
    store: MemoryCheckpointStore, publisher: MemoryControlPublisher
) -> None:
    class ListFails(MemoryCheckpointStore):
        def list(self, prefix: str) -> list[str]:
            raise StoreUnavailableError("list failed")

    flaky = ListFails()
    stored = Announcer(flaky, publisher, "r1", keep_trainer_states=1).save_trainer_state(0, b"s")
    assert flaky.get(stored.uri, stored.sha256) == b"s"
