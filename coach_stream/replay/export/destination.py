"""Where an export goes: a local path, or ``gs://bucket/prefix`` (the archive beside the
checkpoints) through a local staging directory uploaded file by file when it is complete.

A local file export is written to a hidden ``.<name>.<pid>.partial`` beside it and renamed
to its name only when complete: an interrupted export leaves no file that reads as a valid
but truncated Avro or Parquet file (an Avro container is valid after any block).

A ``gs://`` destination is checked before anything is read: the emulator answers a plain
TCP connect within seconds (the client library would retry a dead one for two minutes)
and the bucket exists. An upload that fails after all deletes what it uploaded."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from coach_stream.errors import ConfigError, ServiceUnavailableError

REACH_S = 3.0
"""How long the emulator's TCP connect and the bucket check may take, each."""


class Destination:
    """``local``: where the exporter writes; ``finish()`` uploads it when ``out`` is gs://."""

    def __init__(
        self, out: str, name: str, gcs_emulator: str | None = None, directory: bool = False
    ) -> None:
        """``directory``: ``out`` is a directory the export goes into (it may exist)."""
        self.out, self.gcs_emulator = out, gcs_emulator
        parsed = urlparse(out)
        self._staging: Path | None = None
        self._client: Any = None
        self._final: Path | None = None
        if parsed.scheme == "gs":
            if not parsed.netloc:
                raise ConfigError(f"--out {out!r} names no bucket; write gs://BUCKET/PREFIX.")
            self.bucket, self.prefix = parsed.netloc, parsed.path.strip("/")
            self._client = self._checked_bucket_client()
            self._staging = Path(tempfile.mkdtemp(prefix="coach-stream-export-"))
            self.local = self._staging / name
        elif parsed.scheme and parsed.scheme != "file":
            raise ConfigError(
                f"--out {out!r} uses the unsupported scheme {parsed.scheme!r}; use a local "
                "path or gs://BUCKET/PREFIX."
            )
        else:
            self.local = Path(parsed.path if parsed.scheme == "file" else out).expanduser()
            if directory and self.local.is_dir():
                if not os.access(self.local, os.W_OK):
                    raise ConfigError(f"--out {out}: directory is not writable; choose another.")
            else:
                _check_writable(self.local)
            if not directory:
                self._final = self.local
                self.local = self.local.with_name(f".{self.local.name}.{os.getpid()}.partial")

    @property
    def uploads(self) -> bool:
        return self._staging is not None

    def finish(self) -> str:
        """Rename or upload the complete export; the address it can be found at."""
        if self._final is not None:
            os.replace(self.local, self._final)
            return str(self._final)
        if self._staging is None:
            return str(self.local)
        bucket = self._client.bucket(self.bucket)
        root = self.local
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        base = root.parent
        uploaded: list[Any] = []
        try:
            for path in files:
                name = "/".join(filter(None, [self.prefix, path.relative_to(base).as_posix()]))
                blob = bucket.blob(name)
                blob.upload_from_filename(str(path))  # streamed from disk
                uploaded.append(blob)
        except BaseException as error:
            for blob in uploaded:  # a partial dataset must not read as an export
                with contextlib.suppress(Exception):  # best effort: the upload is the cause
                    blob.delete(retry=None, timeout=REACH_S)
            if isinstance(error, Exception):
                raise ServiceUnavailableError(
                    f"Uploading the export to gs://{self.bucket} failed ({_short(error)}); "
                    "check the storage service and retry."
                ) from error
            raise
        return "gs://" + "/".join(filter(None, [self.bucket, self.prefix, root.name]))

    def _checked_bucket_client(self) -> Any:
        """A storage client whose service answers and whose bucket exists, or one sentence."""
        from google.api_core import exceptions as gexc
        from google.auth import exceptions as auth_exc
        from google.cloud import storage

        if self.gcs_emulator:
            from google.auth.credentials import AnonymousCredentials

            _check_reachable(self.gcs_emulator)
            client = storage.Client(
                project="coach-stream",
                credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
                client_options={"api_endpoint": self.gcs_emulator},
            )
        else:
            try:
                client = storage.Client()
            except auth_exc.DefaultCredentialsError as error:
                raise ConfigError(
                    f"--out {self.out}: no Google credentials were found; run `gcloud auth "
                    "application-default login`, set GOOGLE_APPLICATION_CREDENTIALS, or pass "
                    "--gcs-emulator for fake-gcs-server."
                ) from error
        try:
            exists = client.bucket(self.bucket).exists(retry=None, timeout=REACH_S)
        except (gexc.Forbidden, gexc.Unauthorized) as error:
            raise ConfigError(
                f"--out {self.out}: permission denied on gs://{self.bucket} ({error.code}); "
                "grant this identity roles/storage.objectAdmin on it or fix its credentials."
            ) from error
        except Exception as error:
            raise ServiceUnavailableError(
                f"--out {self.out}: the storage service did not answer ({_short(error)}); "
                "check that it is reachable and retry."
            ) from error
        if not exists:
            raise ConfigError(
                f"--out {self.out}: bucket gs://{self.bucket} does not exist; create it "
                f"(gcloud storage buckets create gs://{self.bucket}) or fix --out."
            )
        return client

    def cleanup(self) -> None:
        """Remove what an export that did not finish wrote (a partial file, the staging)."""
        if self._final is not None:
            self.local.unlink(missing_ok=True)
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)


def _check_reachable(url: str) -> None:
    """The emulator at ``url`` accepts a TCP connection within ``REACH_S``."""
    parsed = urlparse(url if "://" in url else f"http://{url}")
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        port = None
    if not parsed.hostname or port is None:
        raise ConfigError(f"--gcs-emulator {url!r} is not a URL; write http://HOST:PORT.")
    try:
        with socket.create_connection((parsed.hostname, port), timeout=REACH_S):
            pass
    except OSError as error:
        raise ServiceUnavailableError(
            f"The GCS emulator at {url} cannot be reached ({error.strerror or error}); start "
            "it (`coach-stream stack up`) or fix --gcs-emulator / STORAGE_EMULATOR_HOST."
        ) from None


def _short(error: BaseException) -> str:
    return f"{error.__class__.__name__}: {' '.join(str(error).split())[:200]}"


def _check_writable(path: Path) -> None:
    if path.exists():
        raise ConfigError(f"--out {path} exists already; remove it or choose another path.")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"--out {path}: directory {parent} does not exist; create it first.")
    if not os.access(parent, os.W_OK):
        raise ConfigError(f"--out {path}: directory {parent} is not writable; choose another.")
