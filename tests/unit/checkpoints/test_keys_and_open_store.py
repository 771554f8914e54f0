"""Key layout helpers and ``open_store`` address parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from coach_stream.checkpoints import (
    GcsCheckpointStore,
    GcsLocation,
    LocalCheckpointStore,
    open_store,
    parse_store_url,
    policies_prefix,
    policy_key,
    sha256_hex,
    trainer_key,
    verify_sha256,
    version_of,
)
from coach_stream.errors import CheckpointError, ConfigError, IntegrityError
from coach_stream.testing.memory_store import MemoryCheckpointStore


def test_key_layout() -> None:
    assert policy_key("run-1", 7) == "runs/run-1/policies/00000007.pt"
    assert trainer_key("run-1", 12) == "runs/run-1/trainer/00000012.pt"
    assert policies_prefix("run-1") == "runs/run-1/policies/"
    assert policy_key("r", 123456789) == "runs/r/policies/123456789.pt"


def test_version_of_parses_only_versioned_keys() -> None:
    assert version_of(policy_key("r", 42)) == 42
    assert version_of(trainer_key("r", 3)) == 3
    assert version_of("runs/r/policies/latest.pt") is None
    assert version_of("other/00000001.pt") is None


@pytest.mark.parametrize("run_id", ["", "a/b", "../x", " spaced"])
def test_bad_run_ids_are_refused(run_id: str) -> None:
    with pytest.raises(CheckpointError, match=r"(?i)run id"):
        policy_key(run_id, 0)


def test_negative_versions_are_refused() -> None:
    with pytest.raises(CheckpointError, match="negative"):
        policy_key("r", -1)


def test_open_store_gs_with_prefix() -> None:
    store = open_store("gs://bucket/some/prefix/", gcs_emulator_host="http://127.0.0.1:1")
    assert isinstance(store, GcsCheckpointStore)
    assert store.uri("runs/r/policies/00000001.pt") == (
        "gs://bucket/some/prefix/runs/r/policies/00000001.pt"
    )
    assert open_store("gs://bucket").uri("k.pt") == "gs://bucket/k.pt"


def test_open_store_file_url_and_plain_path(tmp_path: Path) -> None:
    by_url = open_store(tmp_path.as_uri())
    by_path = open_store(str(tmp_path))
    assert isinstance(by_url, LocalCheckpointStore) and isinstance(by_path, LocalCheckpointStore)
    assert by_url.root == by_path.root == tmp_path
    assert by_url.uri("a.pt") == (tmp_path / "a.pt").as_uri()


@pytest.mark.parametrize("url", ["s3://bucket/x", "gs:///nobucket", "file://host/dir", ""])
def test_open_store_rejects_unsupported_addresses(url: str) -> None:
    with pytest.raises(ConfigError):
        open_store(url)
    with pytest.raises(ConfigError):
        parse_store_url(url)  # the launcher's pre-flight check reads addresses through it


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("gs://b/some/prefix/", GcsLocation("b", "some/prefix")),
        ("gs://b", GcsLocation("b", "")),
        ("file:///var/ck%20pt", Path("/var/ck pt")),
        ("file://localhost/var/ckpt", Path("/var/ckpt")),
        ("./checkpoints", Path("checkpoints")),
    ],
)
def test_parse_store_url(url: str, where: GcsLocation | Path) -> None:
    assert parse_store_url(url) == where


def test_verify_sha256_passes_matching_bytes_and_names_both_hashes() -> None:
    good, bad = sha256_hex(b"abc"), sha256_hex(b"abd")
    assert verify_sha256(b"abc", good, "x") == b"abc"
    assert verify_sha256(b"abc", None, "x") == b"abc"  # nothing announced: nothing to check
    with pytest.raises(IntegrityError) as raised:
        verify_sha256(b"abc", bad, "gs://b/k.pt")
    assert f"gs://b/k.pt has sha256 {good[:12]}… but {bad[:12]}…" in str(raised.value)


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_every_store_reports_a_mismatch_through_the_one_check(tmp_path: Path, kind: str) -> None:
    store = LocalCheckpointStore(tmp_path) if kind == "local" else MemoryCheckpointStore()
    stored = store.put("k.pt", b"abc")
    wrong = sha256_hex(b"other")
    with pytest.raises(IntegrityError) as from_store:
        store.get(stored.uri, expected_sha256=wrong)
    with pytest.raises(IntegrityError) as from_check:
        verify_sha256(b"abc", wrong, stored.uri)
    assert str(from_store.value) == str(from_check.value)
