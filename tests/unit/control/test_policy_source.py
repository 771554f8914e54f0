"""CheckpointPolicySource: latest at start, non-blocking swaps, rejection keeps the policy."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

import pytest
import torch

from coach_stream.control import Announcer, CheckpointPolicySource
from coach_stream.core import EvaluationReport, PolicyVersion
from coach_stream.errors import RunEndedError
from coach_stream.testing.memory_control import (
    MemoryControlLog,
    MemoryControlPublisher,
    MemoryControlSubscriber,
)
from coach_stream.testing.memory_store import MemoryCheckpointStore

Weights = Callable[[float], bytes]


@pytest.fixture
def announcer(store: MemoryCheckpointStore, publisher: MemoryControlPublisher) -> Announcer:
    return Announcer(store, publisher, "r1", keep_last=100)


@pytest.fixture
def source(
    subscriber: MemoryControlSubscriber, store: MemoryCheckpointStore
) -> CheckpointPolicySource:
    return CheckpointPolicySource(subscriber, store, run_id="r1")


def value_of(policy: object) -> float:
    state = policy.state_dict  # type: ignore[attr-defined]
    return float(state["w"][0])


def test_latest_is_none_before_any_announcement(source: CheckpointPolicySource) -> None:
    assert source.latest(timeout=0.1) is None
    assert source.poll() is None


def test_a_late_joiner_loads_only_the_newest(
    weights: Weights,
    announcer: Announcer,
    source: CheckpointPolicySource,
    store: MemoryCheckpointStore,
) -> None:
    for i in range(50):
        announcer.publish_policy(weights(i), i, i)
    gets_before = store.gets
    latest = source.latest(timeout=1.0)
    assert latest is not None and latest.version.version == 49 and value_of(latest) == 49.0
    assert store.gets - gets_before == 1  # the 49 older versions are never fetched
    assert source.poll() is None  # nothing newer than what latest returned


def test_poll_swaps_once_per_newer_version(
    weights: Weights, announcer: Announcer, source: CheckpointPolicySource
) -> None:
    announcer.publish_policy(weights(0), 0, 0)
    assert source.latest(1.0) is not None
    assert source.poll() is None
    announcer.publish_policy(weights(1), 1, 1)
    newer = source.poll()
    assert newer is not None and newer.version.version == 1 and value_of(newer) == 1.0
    assert source.poll() is None


def test_a_flipped_byte_is_rejected_and_the_current_policy_kept(
    weights: Weights,
    announcer: Announcer,
    source: CheckpointPolicySource,
    store: MemoryCheckpointStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    announcer.publish_policy(weights(0), 0, 0)
    assert source.latest(1.0) is not None
    bad = announcer.publish_policy(weights(1), 1, 1)
    store.corrupt(store.key_of(bad.uri))
    with caplog.at_level("WARNING"):
        assert source.poll() is None
    assert source.current is not None and source.current.version.version == 0
    assert 1 in source.rejected and "sha256" in source.rejected[1]
    assert "rejected policy version 1" in caplog.text and "keeping version 0" in caplog.text
    announcer.publish_policy(weights(2), 2, 2)
    newer = source.poll()
    assert newer is not None and newer.version.version == 2


def test_a_forged_announcement_does_not_shadow_the_real_version_of_the_same_number(
    weights: Weights,
    announcer: Announcer,
    source: CheckpointPolicySource,
    publisher: MemoryControlPublisher,
) -> None:
    real_0 = announcer.publish_policy(weights(0), 0, 0)
    assert source.latest(1.0) is not None
    # Someone who can write to the control topic announces "version 1" first: the bytes of
    # version 0 under a sha256 that does not match them.
    publisher.publish(dataclasses.replace(real_0, version=1, sha256="0" * 64))
    assert source.poll() is None
    assert 1 in source.rejected and "sha256" in source.rejected[1]
    announcer.publish_policy(weights(1), 1, 1)  # the trainer's real version 1
    newer = source.poll()
    assert newer is not None and newer.version.version == 1 and value_of(newer) == 1.0


@pytest.mark.parametrize("damage", ["missing", "not_torch", "size", "pickle"])
def test_bad_checkpoints_of_every_kind_are_rejected(
    weights: Weights,
    damage: str,
    announcer: Announcer,
    source: CheckpointPolicySource,
    store: MemoryCheckpointStore,
    log: MemoryControlLog,
) -> None:
    good = announcer.publish_policy(weights(0), 0, 0)
    assert source.latest(1.0) is not None
    key = "runs/r1/policies/00000001.pt"
    if damage == "missing":
        message = PolicyVersion("r1", 1, store.uri(key), good.sha256, good.size, 1, 1, 0)
    else:
        import hashlib
        import io

        if damage == "not_torch":
            blob = b"garbage" * 10
        elif damage == "pickle":
            buffer = io.BytesIO()
            torch.save({"w": threading.Lock}, buffer)  # a class: not weights-only loadable
            blob = buffer.getvalue()
        else:
            blob = weights(1)
        store.put(key, blob)
        size = len(blob) + (1 if damage == "size" else 0)
        digest = hashlib.sha256(blob).hexdigest()
        message = PolicyVersion("r1", 1, store.uri(key), digest, size, 1, 1, 0)
    log.append(message)
    assert source.poll() is None
    assert source.current is not None and source.current.version.version == 0
    assert 1 in source.rejected


def test_latest_falls_back_to_an_older_good_version(
    weights: Weights,
    announcer: Announcer,
    source: CheckpointPolicySource,
    store: MemoryCheckpointStore,
) -> None:
    announcer.publish_policy(weights(0), 0, 0)
    bad = announcer.publish_policy(weights(1), 1, 1)
    store.corrupt(store.key_of(bad.uri))
    loaded = source.latest(1.0)
    assert loaded is not None and loaded.version.version == 0
    assert source.latest_announced is not None and source.latest_announced.version == 1


def test_an_outage_is_retried_later_not_rejected(
    weights: Weights,
    announcer: Announcer,
    subscriber: MemoryControlSubscriber,
    store: MemoryCheckpointStore,
) -> None:
    now = [0.0]
    source = CheckpointPolicySource(subscriber, store, retry_after_s=5.0, clock=lambda: now[0])
    announcer.publish_policy(weights(0), 0, 0)
    store.fail_gets = True
    assert source.latest(1.0) is None and source.rejected == {}
    store.fail_gets = False
    assert source.poll() is None  # still backing off
    now[0] = 6.0
    loaded = source.poll()
    assert loaded is not None and loaded.version.version == 0


def test_wait_for_blocks_until_the_version_arrives(
    weights: Weights, announcer: Announcer, source: CheckpointPolicySource
) -> None:
    announcer.publish_policy(weights(0), 0, 0)
    assert source.wait_for(0, timeout=1.0).version.version == 0
    timer = threading.Timer(0.05, lambda: announcer.publish_policy(weights(1), 1, 1))
    timer.start()
    try:
        loaded = source.wait_for(1, timeout=10.0)
    finally:
        timer.join()
    assert loaded.version.version == 1 and value_of(loaded) == 1.0


def test_wait_for_times_out_with_a_reason(
    weights: Weights, announcer: Announcer, source: CheckpointPolicySource
) -> None:
    announcer.publish_policy(weights(0), 0, 0)
    with pytest.raises(TimeoutError, match="version 3 was not available"):
        source.wait_for(3, timeout=0.05)


def test_a_version_already_announced_is_taken_even_when_the_wait_ran_out_before_a_read(
    weights: Weights,
    announcer: Announcer,
    subscriber: MemoryControlSubscriber,
    store: MemoryCheckpointStore,
) -> None:
    announcer.publish_policy(weights(0), 0, 0)  # version 0, on the topic, not yet read
    ticks = iter([0.0, 1.0, 1.0, 1.0, 1.0])  # descheduled: past the deadline at once
    source = CheckpointPolicySource(subscriber, store, run_id="r1", clock=lambda: next(ticks))
    assert source.wait_for(0, timeout=0.01).version.version == 0


def test_wait_for_stops_when_the_run_finishes(
    weights: Weights, announcer: Announcer, source: CheckpointPolicySource
) -> None:
    announcer.publish_policy(weights(0), 0, 0)
    announcer.finish("target_reached")
    with pytest.raises(RunEndedError, match="target_reached"):
        source.wait_for(1, timeout=5.0)
    assert source.finished is not None and source.finished.final_version == 0


def test_evaluations_are_collected_and_foreign_runs_ignored(
    weights: Weights, announcer: Announcer, source: CheckpointPolicySource, log: MemoryControlLog
) -> None:
    report = EvaluationReport("r1", 0, 100, (1.0, 3.0), 0)
    log.append(report)
    log.append(PolicyVersion("other-run", 7, "mem://x/y", "0" * 64, 1, 0, 0, 0))
    announcer.publish_policy(weights(0), 0, 0)
    loaded = source.latest(1.0)
    assert loaded is not None and loaded.version.version == 0
    assert source.evaluations == [report] and source.finished is None


def test_memory_log_delivers_to_independent_subscribers(log: MemoryControlLog) -> None:
    publisher = MemoryControlPublisher(log)
    early, late = MemoryControlSubscriber(log), MemoryControlSubscriber(log)
    report = EvaluationReport("r1", 0, 1, (1.0,), 0)
    publisher.publish(report)
    assert early.poll(0.0) == [report] and early.poll(0.0) == []
    assert late.read_to_end(1.0) == [report]


class GatedStore(MemoryCheckpointStore):
    """A store whose reads wait until the test opens the gate (a slow 50 MB transfer)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.reading = threading.Event()

    def get(self, uri: str, expected_sha256: str | None = None) -> bytes:
        self.reading.set()
        assert self.gate.wait(timeout=10), "test never opened the gate"
        return super().get(uri, expected_sha256)


def test_background_poll_never_waits_for_a_transfer(
    weights: Weights, log: MemoryControlLog, subscriber: MemoryControlSubscriber
) -> None:
    store = GatedStore()
    announcer = Announcer(store, MemoryControlPublisher(log), "r1")
    store.gate.set()
    announcer.publish_policy(weights(0), 0, 0)
    store.gate.clear()
    with CheckpointPolicySource(subscriber, store, background=True) as source:
        assert source.poll() is None  # the fetch of version 0 started, gate closed
        assert store.reading.wait(timeout=10)
        assert source.poll() is None and source.current is None  # still not waiting
        store.gate.set()
        source.join_fetch(timeout=10)
        assert source.current is not None and source.current.version.version == 0
        assert source.poll() is None  # the swap already happened in join_fetch


def test_background_fetch_rejects_a_corrupt_version_and_keeps_the_policy(
    weights: Weights,
    announcer: Announcer,
    subscriber: MemoryControlSubscriber,
    store: MemoryCheckpointStore,
) -> None:
    with CheckpointPolicySource(subscriber, store, background=True) as source:
        announcer.publish_policy(weights(0), 0, 0)
        source.poll()
        source.join_fetch(timeout=10)
        bad = announcer.publish_policy(weights(1), 1, 1)
        store.corrupt(store.key_of(bad.uri))
        assert source.poll() is None
        source.join_fetch(timeout=10)
        assert source.current is not None and source.current.version.version == 0
        assert 1 in source.rejected
        announcer.publish_policy(weights(2), 2, 2)
        source.poll()
        source.join_fetch(timeout=10)
        assert source.current.version.version == 2
        assert source.wait_for(2, timeout=1.0).version.version == 2
