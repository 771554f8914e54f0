"""``gs://bucket/prefix``: checkpoints in Google Cloud Storage (or fake-gcs-server).

Create-only writes use the ``ifGenerationMatch=0`` precondition, which GCS evaluates
atomically: of two writers racing for one key exactly one gets 200, the other 412. That
replaces the original Coach's non-atomic S3 "lock" object. Reads hash the bytes and
compare with the announced sha256, so a worker never loads a replaced or damaged file.

Retries: the client library's own retry is switched off and every call goes through
``call_with_retry`` with one policy, because a create-only upload needs care — if an
attempt's 200 is lost (a reset after the server committed), the next attempt gets 412
for our own object. Each upload carries a random writer token in its metadata; a 412
whose stored object bears our token is our success, not a lost race.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import TypeVar, cast
from urllib.parse import urlparse

import requests
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.cloud import storage
from google.cloud.storage import exceptions as storage_exc

from coach_stream.checkpoints.keys import check_key, sha256_hex, verify_sha256
from coach_stream.checkpoints.retry import RetryPolicy, call_with_retry
from coach_stream.core import ClosingContext, StoredObject
from coach_stream.errors import (
    AlreadyExistsError,
    CheckpointError,
    CheckpointNotFoundError,
)

T = TypeVar("T")

_TRANSIENT: tuple[type[BaseException], ...] = (
    gexc.ServerError,  # every 5xx
    gexc.TooManyRequests,
    requests.exceptions.ConnectionError,  # refused, reset, DNS
    requests.exceptions.Timeout,
    requests.exceptions.ChunkedEncodingError,
    ConnectionError,
    TimeoutError,
    auth_exc.TransportError,
    storage_exc.DataCorruption,  # a checksum mismatch in transit: fetch again
)


def is_transient(exc: BaseException) -> bool:
    """Worth another attempt: 5xx, 429, 408, timeouts, connection failures, torn transfers."""
    if isinstance(exc, gexc.GoogleAPICallError) and exc.code == 408:  # request timeout
        return True
    return isinstance(exc, _TRANSIENT)


class GcsCheckpointStore(ClosingContext):
    """A ``CheckpointStore`` on one bucket; keys live under ``prefix``.

    With ``emulator_host`` (the ``STORAGE_EMULATOR_HOST`` value, read by the entry point)
    the client talks to fake-gcs-server anonymously; without it, real GCS through
    application default credentials. The client is built on first use (no I/O here).
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        emulator_host: str | None = None,
        project: str | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        if not bucket or "/" in bucket:
            raise CheckpointError(
                f"GCS bucket name {bucket!r} is invalid; give the store as gs://BUCKET/PREFIX."
            )
        self._bucket_name = bucket
        self._prefix = prefix.strip("/")
        self._emulator_host = emulator_host.rstrip("/") if emulator_host else None
        self._project = project
        self._retry = retry or RetryPolicy()
        self._timeout_s = timeout_s
        self._client: storage.Client | None = None

    def __repr__(self) -> str:
        where = f", emulator_host={self._emulator_host!r}" if self._emulator_host else ""
        return f"GcsCheckpointStore({self._bucket_name!r}, {self._prefix!r}{where})"

    # ------------------------------------------------------------------ protocol

    def uri(self, key: str) -> str:
        return f"gs://{self._bucket_name}/{self._name(key)}"

    def put(self, key: str, data: bytes) -> StoredObject:
        name = self._name(key)
        uri = f"gs://{self._bucket_name}/{name}"
        digest = sha256_hex(data)
        token = uuid.uuid4().hex  # tells our own earlier attempt from a rival writer
        bucket = self._bucket(self._bucket_name)

        def attempt() -> None:
            blob = bucket.blob(name)
            blob.metadata = {"sha256": digest, "writer": token}
            blob.upload_from_string(
                data,
                content_type="application/octet-stream",
                if_generation_match=0,
                retry=None,
                timeout=self._timeout_s,
            )

        try:
            self._call(attempt, f"write {uri}", bucket_name=self._bucket_name)
        except gexc.PreconditionFailed:
            existing = self._call(
                lambda: bucket.get_blob(name, retry=None, timeout=self._timeout_s),
                f"inspect {uri}",
                bucket_name=self._bucket_name,
            )
            if existing is not None and (existing.metadata or {}).get("writer") == token:
                pass  # an earlier attempt of ours landed; its response was lost
            else:
                raise AlreadyExistsError(
                    f"checkpoint {uri} already exists; versions are written once, so publish "
                    "under a new version number."
                ) from None
        return StoredObject(uri=uri, sha256=digest, size=len(data))

    def get(self, uri: str, expected_sha256: str | None = None) -> bytes:
        bucket_name, name = self._locate(uri)
        where = f"gs://{bucket_name}/{name}"
        bucket = self._bucket(bucket_name)
        data: bytes = self._call(
            lambda: cast(
                bytes, bucket.blob(name).download_as_bytes(retry=None, timeout=self._timeout_s)
            ),
            f"read {where}",
            bucket_name=bucket_name,
            missing_object=where,
        )
        return verify_sha256(data, expected_sha256, where)

    def list(self, prefix: str) -> list[str]:
        full = self._name(prefix) if prefix else (f"{self._prefix}/" if self._prefix else "")
        if prefix.endswith("/") and not full.endswith("/"):
            full += "/"
        client = self._get_client()
        skip = len(self._prefix) + 1 if self._prefix else 0

        def names() -> list[str]:
            blobs = client.list_blobs(
                self._bucket_name, prefix=full, retry=None, timeout=self._timeout_s
            )
            return [blob.name[skip:] for blob in blobs]

        found = self._call(
            names, f"list gs://{self._bucket_name}/{full}", bucket_name=self._bucket_name
        )
        return sorted(found)

    def delete(self, key: str) -> None:
        name = self._name(key)
        bucket = self._bucket(self._bucket_name)

        def attempt() -> None:
            # Already gone (or an earlier attempt deleted it): deletes are idempotent.
            with contextlib.suppress(gexc.NotFound):
                bucket.blob(name).delete(retry=None, timeout=self._timeout_s)

        self._call(attempt, f"delete gs://{self._bucket_name}/{name}", self._bucket_name)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # ------------------------------------------------------------------ helpers

    def _name(self, key: str) -> str:
        check_key(key.rstrip("/") if key.endswith("/") else key)
        return f"{self._prefix}/{key}" if self._prefix else key

    def _locate(self, uri: str) -> tuple[str, str]:
        """(bucket, object name) of an announced ``gs://`` uri, or of a key in this store.

        Any object of this store's bucket (a trainer may write under another prefix), but
        only this bucket: the uri comes from the control topic, where a forged announcement
        could otherwise make every worker download any object its credentials can read,
        however large.
        """
        if "://" not in uri:
            return self._bucket_name, self._name(uri)
        parsed = urlparse(uri)
        if parsed.scheme != "gs" or not parsed.netloc or not parsed.path.strip("/"):
            raise CheckpointError(
                f"{uri} is not a gs://bucket/object address, but this worker's checkpoint store "
                f"is gs://{self._bucket_name}/{self._prefix}; configure workers with the "
                "trainer's checkpoint store."
            )
        if parsed.netloc != self._bucket_name:
            raise CheckpointNotFoundError(
                f"{uri[:200]} is not in this worker's bucket gs://{self._bucket_name}; a worker "
                "loads policies only from its own checkpoint store, so configure it with the "
                "trainer's."
            )
        return parsed.netloc, parsed.path.lstrip("/")

    def _get_client(self) -> storage.Client:
        if self._client is None:
            try:
                if self._emulator_host:
                    from google.auth.credentials import AnonymousCredentials

                    self._client = storage.Client(
                        project=self._project or "coach-stream",
                        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
                        client_options={"api_endpoint": self._emulator_host},
                    )
                else:
                    self._client = storage.Client(project=self._project)
            except auth_exc.DefaultCredentialsError as exc:
                raise CheckpointError(
                    "no Google credentials were found for gs:// checkpoints; run "
                    "`gcloud auth application-default login`, set GOOGLE_APPLICATION_CREDENTIALS, "
                    "or set STORAGE_EMULATOR_HOST to use fake-gcs-server."
                ) from exc
        return self._client

    def _bucket(self, name: str) -> storage.Bucket:
        return self._get_client().bucket(name)

    def _call(
        self,
        fn: Callable[[], T],
        describe: str,
        bucket_name: str,
        missing_object: str | None = None,
    ) -> T:
        """Run ``fn`` with retries and turn permanent GCS errors into one clear sentence."""
        try:
            return call_with_retry(
                fn, policy=self._retry, is_transient=is_transient, describe=describe
            )
        except (gexc.Forbidden, gexc.Unauthorized) as exc:
            raise CheckpointError(
                f"permission denied to {describe} ({exc.code}); grant this identity "
                f"roles/storage.objectAdmin on gs://{bucket_name} or fix its credentials."
            ) from exc
        except gexc.NotFound as exc:
            if missing_object is not None and self._bucket_exists(bucket_name):
                raise CheckpointNotFoundError(
                    f"checkpoint {missing_object} does not exist; it was deleted by retention "
                    "or never written, so wait for a newer announced version."
                ) from exc
            raise CheckpointError(
                f"bucket gs://{bucket_name} does not exist; create it "
                f"(gcloud storage buckets create gs://{bucket_name}) or fix the store address."
            ) from exc
        except gexc.PreconditionFailed:
            raise
        except gexc.GoogleAPICallError as exc:
            raise CheckpointError(
                f"GCS refused to {describe} ({exc.code}: {exc.message}); fix the request or "
                "the bucket's configuration."
            ) from exc

    def _bucket_exists(self, bucket_name: str) -> bool:
        try:
            exists: bool = call_with_retry(
                lambda: self._bucket(bucket_name).exists(retry=None, timeout=self._timeout_s),
                policy=self._retry,
                is_transient=is_transient,
                describe=f"check gs://{bucket_name}",
            )
        except gexc.GoogleAPICallError:
            return True  # cannot tell: report the object, the narrower cause
        return exists
