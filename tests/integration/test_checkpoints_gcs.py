"""Checkpoint stores against fake-gcs-server (and the local directory store): the real API.

Races, integrity, retention, the clear errors a user meets, retries that tell our own
lost response from a rival writer, and objects that outlive an emulator restart, all on
the emulator over HTTP.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from google.cloud import storage

from coach_stream.checkpoints import (
    GcsCheckpointStore,
    LocalCheckpointStore,
    RetryPolicy,
    open_store,
    policy_key,
    prune_policies,
    sha256_hex,
)
from coach_stream.errors import (
    AlreadyExistsError,
    CheckpointError,
    CheckpointNotFoundError,
    IntegrityError,
    StoreUnavailableError,
)
from coach_stream.stack import LocalStack, default_cache_dir, gcs

Store = GcsCheckpointStore | LocalCheckpointStore
FAST_RETRY = RetryPolicy(attempts=3, initial_backoff_s=0.05, max_backoff_s=0.1, deadline_s=5)


@pytest.fixture
def gcs_bucket_prefix() -> str:
    return "ckpt"


@pytest.fixture
def bucket(gcs_bucket: str) -> str:
    return gcs_bucket


@pytest.fixture
def make_store(
    request: pytest.FixtureRequest, tmp_path: Path, gcs_endpoint: str
) -> Iterator[Callable[[], Store]]:
    """Independent store instances (own client each) on one bucket/prefix or directory."""
    kind: str = request.param
    if kind == "gcs":
        bucket_name: str = request.getfixturevalue("bucket")
        url = f"gs://{bucket_name}/exp"
    else:
        url = (tmp_path / "ckpt").as_uri()
    stores: list[Store] = []

    def make() -> Store:
        stores.append(open_store(url, gcs_emulator_host=gcs_endpoint, retry=FAST_RETRY))
        return stores[-1]

    yield make
    for store in stores:
        store.close()


both = pytest.mark.parametrize("make_store", ["gcs", "local"], indirect=True)


@both
def test_round_trip_and_listing(make_store: Callable[[], Store]) -> None:
    with make_store() as store:
        for v in (2, 0, 1):
            store.put(policy_key("r1", v), f"v{v}".encode())
        store.put("runs/r1/trainer/00000000.pt", b"t")
        assert store.list("runs/r1/policies/") == [policy_key("r1", v) for v in (0, 1, 2)]
        assert len(store.list("runs/r1/")) == 4
        stored = store.put(policy_key("r1", 3), b"x" * 1000)
        assert stored.sha256 == sha256_hex(b"x" * 1000) and stored.size == 1000
        assert store.get(stored.uri, expected_sha256=stored.sha256) == b"x" * 1000
        if isinstance(store, GcsCheckpointStore):
            assert stored.uri.startswith("gs://ckpt-") and "/exp/runs/r1/" in stored.uri


@both
@pytest.mark.parametrize("size", [1_000, 9 * 1024 * 1024])  # multipart and resumable uploads
def test_racing_writers_exactly_one_wins(make_store: Callable[[], Store], size: int) -> None:
    writers = [make_store() for _ in range(4)]
    key = policy_key("race", 7)
    barrier = threading.Barrier(len(writers))
    results: dict[int, str] = {}

    def write(i: int, store: Store) -> None:
        blob = bytes([i]) * size
        barrier.wait()
        try:
            store.put(key, blob)
            results[i] = "won"
        except AlreadyExistsError:
            results[i] = "lost"

    threads = [threading.Thread(target=write, args=(i, s)) for i, s in enumerate(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    winners = [i for i, r in results.items() if r == "won"]
    assert len(results) == 4 and len(winners) == 1
    assert writers[0].get(writers[0].uri(key)) == bytes([winners[0]]) * size


@both
def test_flipped_byte_is_rejected(
    make_store: Callable[[], Store], gcs_client: storage.Client
) -> None:
    store = make_store()
    key = policy_key("r1", 0)
    blob = bytes(range(256)) * 10
    stored = store.put(key, blob)
    flipped = bytearray(blob)
    flipped[1234] ^= 0x01
    if isinstance(store, GcsCheckpointStore):  # replaced behind the store's back
        bucket_name, name = stored.uri.removeprefix("gs://").split("/", 1)
        gcs_client.bucket(bucket_name).blob(name).upload_from_string(bytes(flipped))
    else:
        (store.root / key).write_bytes(bytes(flipped))
    with pytest.raises(IntegrityError, match="sha256"):
        store.get(stored.uri, expected_sha256=stored.sha256)


@both
def test_retention_keeps_k_and_never_the_announced_one(make_store: Callable[[], Store]) -> None:
    store = make_store()
    for v in range(10):
        store.put(policy_key("r1", v), b"p")
    # Versions 7..9 were written but never announced (e.g. announce failed); 6 is announced.
    deleted = prune_policies(store, "r1", keep_last=2, protected=[6])
    assert deleted == [0, 1, 2, 3, 4, 5, 7]
    assert store.list("runs/r1/policies/") == [policy_key("r1", v) for v in (6, 8, 9)]


@both
def test_missing_object_is_a_clear_error(make_store: Callable[[], Store]) -> None:
    store = make_store()
    with pytest.raises(CheckpointNotFoundError, match="does not exist"):
        store.get(store.uri(policy_key("r1", 99)))


def test_missing_bucket_is_one_clear_sentence(gcs_endpoint: str) -> None:
    store = GcsCheckpointStore(
        f"absent-{uuid.uuid4().hex[:8]}", "x", emulator_host=gcs_endpoint, retry=FAST_RETRY
    )
    with store, pytest.raises(CheckpointError, match=r"bucket gs://absent-\w+ does not exist"):
        store.put("a.pt", b"1")


def test_unreachable_store_fails_after_bounded_retries() -> None:
    policy = RetryPolicy(attempts=3, initial_backoff_s=0.05, deadline_s=5)
    store = GcsCheckpointStore("b", emulator_host="http://127.0.0.1:9", retry=policy)
    started = time.monotonic()
    with store, pytest.raises(StoreUnavailableError, match="3 attempts"):
        store.put("a.pt", b"1")
    assert time.monotonic() - started < 10


def test_a_lost_response_is_recognised_as_our_own_write(
    bucket: str, gcs_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upload lands on the server but the reply is lost: the retry's 412 is our object."""
    real_upload = storage.Blob.upload_from_string
    calls = {"n": 0}

    def upload_then_lose_reply(self: storage.Blob, *args: object, **kwargs: object) -> None:
        calls["n"] += 1
        real_upload(self, *args, **kwargs)
        if calls["n"] == 1:
            raise ConnectionResetError("connection reset by peer (after the server committed)")

    monkeypatch.setattr(storage.Blob, "upload_from_string", upload_then_lose_reply)
    with GcsCheckpointStore(bucket, emulator_host=gcs_endpoint, retry=FAST_RETRY) as store:
        stored = store.put("k.pt", b"mine")
        assert calls["n"] == 2
        assert store.get(stored.uri, expected_sha256=stored.sha256) == b"mine"
        with pytest.raises(AlreadyExistsError):  # a different writer is still refused
            store.put("k.pt", b"theirs")


def test_worker_reads_any_announced_uri_in_the_bucket(bucket: str, gcs_endpoint: str) -> None:
    with (
        GcsCheckpointStore(bucket, "trainer-prefix", emulator_host=gcs_endpoint) as writer,
        GcsCheckpointStore(bucket, "", emulator_host=gcs_endpoint) as reader,
    ):
        stored = writer.put(policy_key("r", 0), b"w")
        assert reader.get(stored.uri, expected_sha256=stored.sha256) == b"w"


def test_stack_emulator_keeps_objects_across_a_restart(tmp_path: Path, gcs_endpoint: str) -> None:
    """Issue 8: an emulator that forgot its objects made a resumed trainer start over.

    A stack of this test's own (own state dir, own port; the shared one is never
    restarted) reusing the cached binary: objects written before ``down`` are there after
    ``up``, the default bucket's creation at the second start finds it and succeeds, and
    create-only still holds; ``down --purge`` discards them.
    """
    del gcs_endpoint  # requested so that the shared stack has provisioned the binary
    shared = LocalStack(default_cache_dir())
    binary = gcs.provision(shared.gcs_bin_dir, tmp_path / "provision.log")
    stack = LocalStack(tmp_path / "cache")
    own_binary = gcs.binary_path(stack.gcs_bin_dir)
    own_binary.parent.mkdir(parents=True)
    own_binary.symlink_to(binary)
    key = policy_key("r1", 0)
    try:
        stack.up(kafka_enabled=False, gcs_enabled=True)
        endpoint = stack.gcs_endpoint()
        with GcsCheckpointStore(gcs.DEFAULT_BUCKET, "exp", emulator_host=endpoint) as store:
            stored = store.put(key, b"weights")
        assert stack.down() == ["gcs"]
        stack.up(kafka_enabled=False, gcs_enabled=True)  # same port unless it was taken since
        endpoint = stack.gcs_endpoint()
        with GcsCheckpointStore(gcs.DEFAULT_BUCKET, "exp", emulator_host=endpoint) as store:
            assert store.list("runs/r1/") == [key]
            assert store.get(stored.uri, expected_sha256=stored.sha256) == b"weights"
            with pytest.raises(AlreadyExistsError):
                store.put(key, b"other")
    finally:
        stack.down(purge=True)
    assert not stack.gcs_data.exists()
