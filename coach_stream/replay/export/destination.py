"""Where an export goes: a local path, or ``gs://bucket/prefix`` (the archive beside the
checkpoints) through a local staging directory uploaded file by file when it is complete.

A local file export is written to a hidden ``.<name>.<pid>.partial`` beside it and renamed
to its name only when complete: an interrupted export leaves no file that reads as a valid
but truncated Avro or Parquet file (an Avro container is valid after any block)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from urllib.parse import urlparse

from coach_stream.errors import ConfigError


class Destination:
    """``local``: where the exporter writes; ``finish()`` uploads it when ``out`` is gs://."""

    def __init__(
        self, out: str, name: str, gcs_emulator: str | None = None, directory: bool = False
    ) -> None:
        """``directory``: ``out`` is a directory the export goes into (it may exist)."""
        self.out, self.gcs_emulator = out, gcs_emulator
        parsed = urlparse(out)
        self._staging: Path | None = None
        self._final: Path | None = None
        if parsed.scheme == "gs":
            if not parsed.netloc:
                raise ConfigError(f"--out {out!r} names no bucket; write gs://BUCKET/PREFIX.")
            self.bucket, self.prefix = parsed.netloc, parsed.path.strip("/")
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
        from google.cloud import storage

        if self.gcs_emulator:
            from google.auth.credentials import AnonymousCredentials

            client = storage.Client(
                project="coach-stream",
                credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
                client_options={"api_endpoint": self.gcs_emulator},
            )
        else:
            client = storage.Client()
        bucket = client.bucket(self.bucket)
        root = self.local
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        base = root.parent
        for path in files:
            name = "/".join(filter(None, [self.prefix, path.relative_to(base).as_posix()]))
            bucket.blob(name).upload_from_filename(str(path))  # streamed from disk
        return "gs://" + "/".join(filter(None, [self.bucket, self.prefix, root.name]))

    def cleanup(self) -> None:
        """Remove what an export that did not finish wrote (a partial file, the staging)."""
        if self._final is not None:
            self.local.unlink(missing_ok=True)
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)


def _check_writable(path: Path) -> None:
    if path.exists():
        raise ConfigError(f"--out {path} exists already; remove it or choose another path.")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"--out {path}: directory {parent} does not exist; create it first.")
    if not os.access(parent, os.W_OK):
        raise ConfigError(f"--out {path}: directory {parent} is not writable; choose another.")
