"""``file:///dir``: the default checkpoint store, a directory on this machine (or NFS).

Create-only and crash-safe without locks: the bytes go to a unique temporary file in the
target directory, are fsynced, and are then published with ``os.link``, which fails if
the name exists (an atomic create-if-absent on POSIX filesystems, NFS included). A reader
therefore sees either no object or the complete one, never a torn write; two writers
racing for one key get exactly one winner. The original Coach's NFS store wrote in place.
"""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from pathlib import Path
from urllib.parse import unquote, urlparse

from coach_stream.checkpoints.keys import check_key, sha256_hex, verify_sha256
from coach_stream.core import ClosingContext, StoredObject
from coach_stream.errors import (
    AlreadyExistsError,
    CheckpointError,
    CheckpointNotFoundError,
)

_TMP_SUFFIX = ".tmp"


class LocalCheckpointStore(ClosingContext):
    """A ``CheckpointStore`` rooted at a directory; keys are relative paths under it."""

    def __init__(self, root: Path | str) -> None:
        # No I/O here: the directory is created by the first write.
        self._root = Path(root).expanduser().absolute()

    @property
    def root(self) -> Path:
        return self._root

    def __repr__(self) -> str:
        return f"LocalCheckpointStore({str(self._root)!r})"

    # ------------------------------------------------------------------ protocol

    def uri(self, key: str) -> str:
        return (self._root / check_key(key)).as_uri()

    def put(self, key: str, data: bytes) -> StoredObject:
        target = self._root / check_key(key)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}{_TMP_SUFFIX}")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "xb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(tmp, target)  # atomic, and fails if the name exists
            except FileExistsError:
                raise AlreadyExistsError(
                    f"checkpoint {target.as_uri()} already exists; versions are written once, "
                    "so publish under a new version number."
                ) from None
            _fsync_dir(target.parent)
        except PermissionError as exc:
            raise CheckpointError(
                f"permission denied writing {target}; make {self._root} writable by this user "
                "or choose another checkpoint directory."
            ) from exc
        except OSError as exc:
            raise CheckpointError(
                f"could not write {target} ({exc.strerror or exc}); check the disk and the "
                "checkpoint directory."
            ) from exc
        finally:
            with contextlib.suppress(OSError):  # best effort: never mask the real error
                tmp.unlink()
        return StoredObject(uri=target.as_uri(), sha256=sha256_hex(data), size=len(data))

    def get(self, uri: str, expected_sha256: str | None = None) -> bytes:
        path = self._path_of(uri)
        try:
            data = _read_regular_file(path)
        except FileNotFoundError:
            raise CheckpointNotFoundError(
                f"checkpoint {path.as_uri()} does not exist; it was deleted by retention or "
                "never written, so wait for a newer announced version."
            ) from None
        except PermissionError as exc:
            raise CheckpointError(
                f"permission denied reading {path}; make the checkpoint directory readable."
            ) from exc
        except OSError as exc:
            raise CheckpointError(f"could not read {path} ({exc}); check the disk.") from exc
        return verify_sha256(data, expected_sha256, path.as_uri())

    def list(self, prefix: str) -> list[str]:
        base = self._root / prefix
        # A prefix is a path prefix, not necessarily a directory: "runs/r1/pol" matches too.
        directory = base if prefix.endswith("/") or base.is_dir() else base.parent
        if not directory.is_dir():
            return []
        keys = []
        for dirpath, _dirs, files in os.walk(directory):
            for name in files:
                if name.startswith(".") and name.endswith(_TMP_SUFFIX):
                    continue
                key = Path(dirpath, name).relative_to(self._root).as_posix()
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self._root / check_key(key)).unlink()

    # ------------------------------------------------------------------ context manager

    def close(self) -> None:
        """Nothing to release; present so every store is used the same way."""

    # ------------------------------------------------------------------ helpers

    def _path_of(self, uri: str) -> Path:
        """A ``file://`` uri as announced, or a key relative to this store's root.

        Only paths inside the root: the uri comes from the control topic, where a forged
        announcement could otherwise make a worker read ``/dev/zero`` (memory until the
        kernel kills it), block on a named pipe, or hash any file it can read.
        """
        if "://" not in uri:
            path = self._root / check_key(uri)
        else:
            parsed = urlparse(uri)
            if parsed.scheme != "file":
                raise CheckpointError(
                    f"{uri} is not a file:// address, but this worker's checkpoint store is "
                    f"{self._root.as_uri()}; configure workers with the trainer's checkpoint "
                    "store."
                )
            path = Path(unquote(parsed.path))
        root = self._root.resolve()
        try:
            inside = "\x00" not in str(path) and path.resolve().is_relative_to(root)
        except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
            inside = False
        if not inside:
            raise CheckpointNotFoundError(
                f"{uri[:200]!r} is not a file in this checkpoint store ({root.as_uri()}); "
                "a worker loads policies only from its own store, so configure it with the "
                "trainer's."
            )
        return path


def _read_regular_file(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file (never a device, pipe or directory).

    Opened without blocking and checked on the open descriptor, so nothing swapped in
    between a check and the read can make it block or read without end.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CheckpointNotFoundError(
            f"{path.as_uri()} is not a regular file, so it cannot be a checkpoint."
        )
    with open(fd, "rb") as handle:
        return handle.read()


def _fsync_dir(directory: Path) -> None:
    """Make the new directory entry durable, so a crash cannot lose an announced file."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
