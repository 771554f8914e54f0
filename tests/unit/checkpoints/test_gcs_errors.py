# mypy: disable-error-code="no-untyped-call"
"""GcsCheckpointStore's error sentences, checked without a network (no client calls made)."""

from __future__ import annotations

import pytest
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.cloud import storage

from coach_stream.checkpoints import GcsCheckpointStore, RetryPolicy
from coach_stream.errors import CheckpointError, CheckpointNotFoundError, StoreUnavailableError

NO_WAIT = RetryPolicy(attempts=2, initial_backoff_s=0.0, deadline_s=1.0)


def raising(exc: BaseException):  # type: ignore[no-untyped-def]
    def fn() -> None:
        raise exc

    return fn


@pytest.fixture
def store() -> GcsCheckpointStore:
    return GcsCheckpointStore("my-bucket", "exp", emulator_host="http://127.0.0.1:1", retry=NO_WAIT)


@pytest.mark.parametrize("exc", [gexc.Forbidden("no"), gexc.Unauthorized("who")])
def test_permission_denied_is_one_sentence(store: GcsCheckpointStore, exc: Exception) -> None:
    with pytest.raises(CheckpointError, match=r"permission denied to write x.*objectAdmin"):
        store._call(raising(exc), "write x", bucket_name="my-bucket")


def test_not_found_on_write_means_the_bucket_is_missing(store: GcsCheckpointStore) -> None:
    with pytest.raises(CheckpointError, match=r"bucket gs://my-bucket does not exist; create"):
        store._call(raising(gexc.NotFound("404")), "write x", bucket_name="my-bucket")


def test_other_api_errors_name_the_action(store: GcsCheckpointStore) -> None:
    with pytest.raises(CheckpointError, match="GCS refused to list y"):
        store._call(raising(gexc.BadRequest("bad")), "list y", bucket_name="my-bucket")


def test_transient_errors_end_as_store_unavailable(store: GcsCheckpointStore) -> None:
    with pytest.raises(StoreUnavailableError, match="could not read z"):
        store._call(raising(gexc.ServiceUnavailable("503")), "read z", bucket_name="my-bucket")


def test_precondition_failures_pass_through_for_put(store: GcsCheckpointStore) -> None:
    with pytest.raises(gexc.PreconditionFailed):
        store._call(raising(gexc.PreconditionFailed("412")), "write", bucket_name="my-bucket")


def test_missing_credentials_name_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_credentials(*args: object, **kwargs: object) -> None:
        raise auth_exc.DefaultCredentialsError("none")

    monkeypatch.setattr(storage, "Client", no_credentials)
    store = GcsCheckpointStore("b")  # real GCS: application default credentials
    with pytest.raises(CheckpointError, match="application-default login"):
        store.list("runs/")


def test_addresses_of_other_schemes_are_refused(store: GcsCheckpointStore) -> None:
    with pytest.raises(CheckpointError, match="configure workers with the trainer's"):
        store.get("file:///tmp/x.pt")


def test_invalid_bucket_names_are_refused() -> None:
    with pytest.raises(CheckpointError, match="gs://BUCKET/PREFIX"):
        GcsCheckpointStore("a/b")


def test_an_address_in_another_bucket_is_refused_as_missing(store: GcsCheckpointStore) -> None:
    # A forged PolicyVersion could otherwise make every worker download any object its
    # credentials can read, however large (found while fuzzing the control handler).
    with pytest.raises(CheckpointNotFoundError, match="is not in this worker's bucket gs://my-"):
        store.get("gs://other-bucket/exp/runs/r/policies/00000000.pt", expected_sha256="0" * 64)
    assert store._client is None  # refused before any request
