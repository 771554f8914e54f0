"""Policy versions end to end on the real broker, with fake-gcs-server and the local store.

The issue's list: 50 versions announced and a late joiner gets the latest; a flipped byte
is rejected and the current policy kept; two writers racing for one version, exactly one
announces; retention keeps K and never the announced one; a store outage during announce
leaves no announcement pointing at a missing object.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from confluent_kafka import Producer
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from coach_stream.checkpoints import (
    GcsCheckpointStore,
    LocalCheckpointStore,
    RetryPolicy,
    open_store,
    policy_key,
    policy_to_bytes,
)
from coach_stream.control import Announcer, CheckpointPolicySource
from coach_stream.core import PolicyVersion, RunFinished, StoredObject
from coach_stream.errors import (
    AlreadyExistsError,
    CheckpointError,
    RunEndedError,
    StoreUnavailableError,
)
from coach_stream.transport.admin import ensure_run_topics
from coach_stream.transport.control import KafkaControlPublisher, KafkaControlSubscriber
from coach_stream.transport.settings import KafkaSettings, RunTopics

Store = GcsCheckpointStore | LocalCheckpointStore
FAST_RETRY = RetryPolicy(attempts=3, initial_backoff_s=0.05, max_backoff_s=0.1, deadline_s=5)


def weights(value: float) -> bytes:
    return policy_to_bytes({"w": torch.full((8,), value), "b": torch.zeros(2)})


@pytest.fixture
def settings(kafka_bootstrap: str) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=kafka_bootstrap)


@pytest.fixture
def run(settings: KafkaSettings) -> tuple[str, RunTopics]:
    run_id = f"ctl-{uuid.uuid4().hex[:12]}"
    topics = RunTopics.for_run(run_id)
    ensure_run_topics(settings, topics, experience_partitions=1)
    return run_id, topics


@pytest.fixture(params=["gcs", "local"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "gcs":
        return f"gs://{request.getfixturevalue('gcs_bucket')}/checkpoints"
    return (tmp_path / "ckpt").as_uri()


@pytest.fixture
def make_store(store_url: str, gcs_endpoint: str) -> Iterator[Callable[[], Store]]:
    stores: list[Store] = []

    def make() -> Store:
        stores.append(open_store(store_url, gcs_emulator_host=gcs_endpoint, retry=FAST_RETRY))
        return stores[-1]

    yield make
    for store in stores:
        store.close()


def policy_versions(settings: KafkaSettings, topics: RunTopics) -> list[PolicyVersion]:
    """Every PolicyVersion on the control topic, read by a fresh subscriber."""
    with KafkaControlSubscriber(settings, topics) as subscriber:
        return [m for m in subscriber.read_to_end(30) if isinstance(m, PolicyVersion)]


def test_fifty_versions_and_a_late_joiner_gets_the_latest(
    settings: KafkaSettings, run: tuple[str, RunTopics], make_store: Callable[[], Store]
) -> None:
    run_id, topics = run
    trainer_store, worker_store = make_store(), make_store()
    with (
        KafkaControlPublisher(settings, topics) as publisher,
        KafkaControlSubscriber(settings, topics) as early_sub,
    ):
        early = CheckpointPolicySource(early_sub, worker_store, run_id=run_id)
        assert early.latest(timeout=30) is None
        announcer = Announcer(trainer_store, publisher, run_id, keep_last=5)
        for i in range(50):
            message = announcer.publish_policy(weights(i), trainer_step=i, env_steps=100 * i)
            assert message.version == i
        # Whichever version the early worker has swapped to by now, it is that version's
        # policy: weights and step count as announced, not a mix of two versions.
        first = early.wait_for(0, timeout=30)
        assert first.version.env_steps == 100 * first.version.version
        expected = torch.full((8,), float(first.version.version))
        assert torch.equal(first.state_dict["w"], expected)  # type: ignore[arg-type]
        assert early.wait_for(49, timeout=30).version.version == 49

    with KafkaControlSubscriber(settings, topics) as late_sub:
        late = CheckpointPolicySource(late_sub, make_store(), run_id=run_id)
        loaded = late.latest(timeout=30)
    assert loaded is not None and loaded.version.version == 49
    assert loaded.version.env_steps == 4900
    assert torch.equal(loaded.state_dict["w"], torch.full((8,), 49.0))  # type: ignore[arg-type]
    assert late.rejected == {}
    versions = [m.version for m in policy_versions(settings, topics)]
    assert versions == list(range(50))
    assert trainer_store.list(f"runs/{run_id}/policies/") == [
        policy_key(run_id, v) for v in range(45, 50)
    ]


def test_a_flipped_byte_is_rejected_and_the_policy_kept(
    settings: KafkaSettings,
    run: tuple[str, RunTopics],
    make_store: Callable[[], Store],
    gcs_endpoint: str,
    tmp_path: Path,
) -> None:
    run_id, topics = run
    store = make_store()
    with (
        KafkaControlPublisher(settings, topics) as publisher,
        KafkaControlSubscriber(settings, topics) as subscriber,
    ):
        announcer = Announcer(store, publisher, run_id, keep_last=10)
        announcer.publish_policy(weights(0), 0, 0)
        source = CheckpointPolicySource(subscriber, make_store(), run_id=run_id)
        assert source.wait_for(0, timeout=30).version.version == 0
        # A version whose object is damaged after it was announced.
        bad = announcer.publish_policy(weights(1), 1, 1)
        _flip_a_byte(store, bad, gcs_endpoint)
        with pytest.raises(TimeoutError, match="rejected"):
            source.wait_for(1, timeout=1.5)
        assert source.current is not None and source.current.version.version == 0
        assert "sha256" in source.rejected[1]
        announcer.publish_policy(weights(2), 2, 2)
        assert source.wait_for(2, timeout=30).version.version == 2


def _flip_a_byte(store: Store, message: PolicyVersion, gcs_endpoint: str) -> None:
    if isinstance(store, GcsCheckpointStore):
        client = storage.Client(
            project="test",
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": gcs_endpoint},
        )
        bucket, name = message.uri.removeprefix("gs://").split("/", 1)
        blob = client.bucket(bucket).blob(name)
        data = bytearray(blob.download_as_bytes())
        data[len(data) // 2] ^= 0x10
        blob.upload_from_string(bytes(data))
        client.close()
    else:
        path = Path(message.uri.removeprefix("file://"))
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x10
        path.write_bytes(bytes(data))


def test_two_trainers_racing_for_one_version_exactly_one_announces(
    settings: KafkaSettings, run: tuple[str, RunTopics], make_store: Callable[[], Store]
) -> None:
    run_id, topics = run
    barrier = threading.Barrier(2)
    outcome: dict[int, object] = {}

    def trainer(i: int) -> None:
        with KafkaControlPublisher(settings, topics) as publisher:
            announcer = Announcer(make_store(), publisher, run_id, start_version=3)
            barrier.wait()
            try:
                outcome[i] = announcer.publish_policy(weights(10 + i), i, i)
            except AlreadyExistsError as exc:
                outcome[i] = exc

    threads = [threading.Thread(target=trainer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    winners = [o for o in outcome.values() if isinstance(o, PolicyVersion)]
    losers = [o for o in outcome.values() if isinstance(o, AlreadyExistsError)]
    assert len(winners) == 1 and len(losers) == 1
    assert policy_versions(settings, topics) == winners
    loaded = make_store().get(winners[0].uri, expected_sha256=winners[0].sha256)
    assert loaded == weights(10 + winners[0].trainer_step)


def test_retention_keeps_k_and_never_the_announced_one(
    settings: KafkaSettings, run: tuple[str, RunTopics], make_store: Callable[[], Store]
) -> None:
    run_id, topics = run
    store = make_store()
    with KafkaControlPublisher(settings, topics) as publisher:
        announcer = Announcer(store, publisher, run_id, keep_last=3)
        for i in range(8):
            announcer.publish_policy(weights(i), i, i)
        assert store.list(f"runs/{run_id}/policies/") == [policy_key(run_id, v) for v in (5, 6, 7)]
        # Orphans above the announced version (written, then the announce failed) must not
        # push the announced version out of the window.
        for v in (8, 9, 10):
            store.put(policy_key(run_id, v), b"orphan")
        resumed = Announcer(
            store, publisher, run_id, keep_last=1, last_announced=announcer.last_announced
        )
        assert resumed.next_version == 11
        with KafkaControlSubscriber(settings, topics) as subscriber:
            source = CheckpointPolicySource(subscriber, make_store(), run_id=run_id)
            loaded = source.latest(timeout=30)
            assert loaded is not None and loaded.version.version == 7
            resumed.publish_policy(weights(11), 11, 11)
            assert store.list(f"runs/{run_id}/policies/") == [policy_key(run_id, 11)]
            assert source.wait_for(11, timeout=30).version.version == 11


class _FlakyStore:
    """A real store whose calls can be routed to a store that is down, mid-run.

    ``mode``: "up" (everything real), "down" (everything to the broken store), or
    "verify_down" (writes land in the real store, the read-back hits the broken one).
    """

    def __init__(self, real: Store, down: Store) -> None:
        self.real, self.down = real, down
        self.mode = "up"

    def uri(self, key: str) -> str:
        return self.real.uri(key)

    def put(self, key: str, data: bytes) -> StoredObject:
        return (self.down if self.mode == "down" else self.real).put(key, data)

    def get(self, uri: str, expected_sha256: str | None = None) -> bytes:
        if self.mode == "up":
            return self.real.get(uri, expected_sha256)
        return self.down.get(uri, expected_sha256)

    def list(self, prefix: str) -> list[str]:
        return self.real.list(prefix)

    def delete(self, key: str) -> None:
        self.real.delete(key)


def test_store_outage_during_announce_announces_nothing_missing(
    settings: KafkaSettings,
    run: tuple[str, RunTopics],
    make_store: Callable[[], Store],
    tmp_path: Path,
) -> None:
    run_id, topics = run
    real = make_store()
    down: Store
    if isinstance(real, GcsCheckpointStore):  # the same bucket, but nothing listens on port 9
        bucket = real.uri(policy_key(run_id, 0)).removeprefix("gs://").split("/")[0]
        down = GcsCheckpointStore(bucket, emulator_host="http://127.0.0.1:9", retry=FAST_RETRY)
    else:  # its "directory" is a file, and its files are gone: every call fails
        blocker = tmp_path / "not-a-dir"
        blocker.write_bytes(b"")
        down = LocalCheckpointStore(blocker)
    store = _FlakyStore(real, down)
    with KafkaControlPublisher(settings, topics) as publisher:
        announcer = Announcer(store, publisher, run_id, keep_last=10)
        announcer.publish_policy(weights(0), 0, 0)
        store.mode = "down"
        with pytest.raises(CheckpointError):  # the write itself fails
            announcer.publish_policy(weights(1), 1, 1)
        if isinstance(real, GcsCheckpointStore):
            store.mode = "verify_down"
            with pytest.raises(StoreUnavailableError):  # written, but not verifiable
                announcer.publish_policy(weights(2), 2, 2)
            assert real.list(f"runs/{run_id}/policies/")[-1] == policy_key(run_id, 2)
        store.mode = "up"
        last = announcer.publish_policy(weights(3), 3, 3)
    announced = policy_versions(settings, topics)
    assert [m.version for m in announced] == [0, last.version]
    assert last.version == (3 if isinstance(real, GcsCheckpointStore) else 2)
    checker = make_store()
    for message in announced:  # every announcement points at an existing, matching object
        assert checker.get(message.uri, expected_sha256=message.sha256)


def test_run_finished_reaches_waiting_workers_and_restarts_resume(
    settings: KafkaSettings, run: tuple[str, RunTopics], make_store: Callable[[], Store]
) -> None:
    run_id, topics = run
    store = make_store()
    with (
        KafkaControlPublisher(settings, topics) as publisher,
        KafkaControlSubscriber(settings, topics) as subscriber,
    ):
        announcer = Announcer(store, publisher, run_id)
        for i in range(3):
            announcer.publish_policy(weights(i), i, i)
        finished = announcer.finish("target_reached")
        source = CheckpointPolicySource(subscriber, store, run_id=run_id)
        with pytest.raises(RunEndedError, match="target_reached"):
            source.wait_for(3, timeout=30)
        assert source.finished == finished
        assert source.current is not None and source.current.version.version == 2
    with KafkaControlSubscriber(settings, topics) as again:  # what a restarted trainer reads
        messages = again.read_to_end(30)
    assert [m.version for m in messages if isinstance(m, PolicyVersion)] == [0, 1, 2]
    assert messages[-1] == finished


def test_undecodable_control_records_are_skipped(
    settings: KafkaSettings, run: tuple[str, RunTopics], make_store: Callable[[], Store]
) -> None:
    run_id, topics = run
    raw = Producer({"bootstrap.servers": settings.bootstrap_servers})
    raw.produce(topics.control, b"\x00garbage", run_id.encode())
    assert raw.flush(30) == 0
    store = make_store()
    with KafkaControlPublisher(settings, topics) as publisher:
        Announcer(store, publisher, run_id).publish_policy(weights(0), 0, 0)
    with KafkaControlSubscriber(settings, topics) as subscriber:
        messages = subscriber.read_to_end(30)
        assert subscriber.undecodable == 1 and subscriber.position == 2
    assert [type(m) for m in messages] == [PolicyVersion]
    assert not any(isinstance(m, RunFinished) for m in messages)
