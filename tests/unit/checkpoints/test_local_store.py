"""LocalCheckpointStore: create-only, verified reads, listing, and safe key handling."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from coach_stream.checkpoints import LocalCheckpointStore, policy_key, sha256_hex
from coach_stream.errors import (
    AlreadyExistsError,
    CheckpointError,
    CheckpointNotFoundError,
    IntegrityError,
)


@pytest.fixture
def store(tmp_path: Path) -> LocalCheckpointStore:
    return LocalCheckpointStore(tmp_path / "ckpt")


def test_constructor_does_no_io(tmp_path: Path) -> None:
    LocalCheckpointStore(tmp_path / "not-yet")
    assert not (tmp_path / "not-yet").exists()


def test_put_then_get_round_trips_and_reports_hash(store: LocalCheckpointStore) -> None:
    key = policy_key("r1", 3)
    stored = store.put(key, b"weights")
    assert stored.uri == store.uri(key)
    assert stored.uri.startswith("file:///") and stored.uri.endswith("runs/r1/policies/00000003.pt")
    assert stored.sha256 == sha256_hex(b"weights") and stored.size == 7
    assert store.get(stored.uri, expected_sha256=stored.sha256) == b"weights"
    assert store.get(key) == b"weights"  # a bare key works too


def test_second_put_is_refused_and_keeps_the_first(store: LocalCheckpointStore) -> None:
    key = policy_key("r1", 0)
    store.put(key, b"first")
    with pytest.raises(AlreadyExistsError, match="already exists"):
        store.put(key, b"second")
    assert store.get(key) == b"first"


def test_racing_writers_exactly_one_wins(store: LocalCheckpointStore) -> None:
    key = policy_key("race", 1)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []
    lock = threading.Lock()

    def write(i: int) -> None:
        barrier.wait()
        try:
            store.put(key, f"writer-{i}".encode())
            result = f"won-{i}"
        except AlreadyExistsError:
            result = "lost"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if o.startswith("won")]
    assert len(winners) == 1 and outcomes.count("lost") == 7
    assert store.get(key) == f"writer-{winners[0].split('-')[1]}".encode()


def test_flipped_byte_is_rejected(store: LocalCheckpointStore) -> None:
    stored = store.put(policy_key("r1", 1), b"abcdef")
    path = store.root / policy_key("r1", 1)
    path.write_bytes(b"abcdeg")
    with pytest.raises(IntegrityError, match="sha256"):
        store.get(stored.uri, expected_sha256=stored.sha256)


def test_missing_object_is_a_clear_error(store: LocalCheckpointStore) -> None:
    with pytest.raises(CheckpointNotFoundError, match="does not exist"):
        store.get(store.uri(policy_key("r1", 9)))


def test_list_is_sorted_by_prefix_and_skips_temporaries(store: LocalCheckpointStore) -> None:
    for v in (2, 0, 1):
        store.put(policy_key("r1", v), b"x")
    store.put("runs/r1/trainer/00000000.pt", b"t")
    (store.root / "runs/r1/policies/.00000009.pt.abc.tmp").write_bytes(b"partial")
    assert store.list("runs/r1/policies/") == [policy_key("r1", v) for v in (0, 1, 2)]
    assert store.list("runs/r1/") == [
        *(policy_key("r1", v) for v in (0, 1, 2)),
        "runs/r1/trainer/00000000.pt",
    ]
    assert store.list("runs/r1/pol") == [policy_key("r1", v) for v in (0, 1, 2)]
    assert store.list("runs/other/") == []


def test_no_temporary_files_are_left_behind(store: LocalCheckpointStore) -> None:
    store.put("a/b.pt", b"1")
    with pytest.raises(AlreadyExistsError):
        store.put("a/b.pt", b"2")
    assert sorted(p.name for p in (store.root / "a").iterdir()) == ["b.pt"]


def test_delete_is_idempotent(store: LocalCheckpointStore) -> None:
    store.put("a/b.pt", b"1")
    store.delete("a/b.pt")
    store.delete("a/b.pt")
    assert store.list("a/") == []


@pytest.mark.parametrize("key", ["../escape.pt", "/abs.pt", "a//b", "", "a/./b"])
def test_keys_cannot_escape_the_root(store: LocalCheckpointStore, key: str) -> None:
    with pytest.raises(CheckpointError, match="not a relative path"):
        store.put(key, b"x")


def test_a_gs_uri_names_the_misconfiguration(store: LocalCheckpointStore) -> None:
    with pytest.raises(CheckpointError, match="configure workers with the trainer's"):
        store.get("gs://bucket/runs/r1/policies/00000000.pt")


# An announced uri comes from the control topic, which anyone allowed to write to it can
# forge (found by tests/fuzz): reading must stay inside the store and never block or grow.
@pytest.mark.parametrize(
    "uri",
    [
        "file:///dev/zero",  # read_bytes() grew until the kernel killed the worker
        "file:///etc/hostname",
        "file://elsewhere/etc/hostname",
        "file:///tmp/a%00b.pt",  # ValueError (embedded null byte) crashed the worker
        "runs/r1/policies/\x00.pt",
    ],
)
def test_an_address_outside_the_store_is_refused_as_missing(
    store: LocalCheckpointStore, uri: str
) -> None:
    with pytest.raises(CheckpointNotFoundError, match="is not a file in this checkpoint store"):
        store.get(uri, expected_sha256="0" * 64)


def test_a_symlink_out_of_the_store_is_refused(store: LocalCheckpointStore, tmp_path: Path) -> None:
    (tmp_path / "secret").write_bytes(b"not yours")
    store.put(policy_key("r1", 0), b"x")
    link = store.root / "runs" / "r1" / "policies" / "00000001.pt"
    link.symlink_to(tmp_path / "secret")
    with pytest.raises(CheckpointNotFoundError, match="is not a file in this checkpoint store"):
        store.get(link.as_uri())


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_only_regular_files_are_read(store: LocalCheckpointStore, kind: str) -> None:
    store.put(policy_key("r1", 0), b"x")
    target = store.root / "runs" / "r1" / "policies" / "00000001.pt"
    if kind == "fifo":  # opening one for reading would block until a writer came
        os.mkfifo(target)
    else:
        target.mkdir()
    with pytest.raises(CheckpointNotFoundError, match="is not a regular file"):
        store.get(target.as_uri())
