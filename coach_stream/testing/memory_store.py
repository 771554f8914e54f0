"""An in-memory ``CheckpointStore`` with fault injection, for unit tests.

It keeps the real stores' contract (create-only puts, sha256-verified gets, sorted
listing, idempotent deletes) so code tested against it behaves the same on GCS, and it
can simulate the failures those stores see: an outage, a corrupted object, a lost file.
"""

from __future__ import annotations

import threading

from coach_stream.checkpoints.keys import check_key, sha256_hex, verify_sha256
from coach_stream.core import StoredObject
from coach_stream.errors import (
    AlreadyExistsError,
    CheckpointError,
    CheckpointNotFoundError,
    StoreUnavailableError,
)

_SCHEME = "mem://"


class MemoryCheckpointStore:
    """Objects in a dict, addressed as ``mem://<name>/<key>``.

    Fault injection: set ``outage = True`` to make every call fail like an unreachable
    store, ``fail_puts``/``fail_gets`` to fail only those, and call ``corrupt(key)`` to flip
    one byte of a stored object behind the store's back.
    """

    def __init__(self, name: str = "checkpoints") -> None:
        self._name = name
        self._objects: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self.outage = False
        self.fail_puts = False
        self.fail_gets = False
        self.gets = 0

    @property
    def objects(self) -> dict[str, bytes]:
        """A snapshot of every stored key and its bytes."""
        with self._lock:
            return dict(self._objects)

    def uri(self, key: str) -> str:
        return f"{_SCHEME}{self._name}/{check_key(key)}"

    def put(self, key: str, data: bytes) -> StoredObject:
        self._check_available("write", self.fail_puts)
        with self._lock:
            if key in self._objects:
                raise AlreadyExistsError(f"checkpoint {self.uri(key)} already exists.")
            self._objects[check_key(key)] = bytes(data)
        return StoredObject(uri=self.uri(key), sha256=sha256_hex(data), size=len(data))

    def get(self, uri: str, expected_sha256: str | None = None) -> bytes:
        self._check_available("read", self.fail_gets)
        key = self.key_of(uri)
        with self._lock:
            self.gets += 1
            data = self._objects.get(key)
        if data is None:
            raise CheckpointNotFoundError(f"checkpoint {uri} does not exist.")
        return verify_sha256(data, expected_sha256, uri)

    def list(self, prefix: str) -> list[str]:
        self._check_available("list", False)
        with self._lock:
            return sorted(k for k in self._objects if k.startswith(prefix))

    def delete(self, key: str) -> None:
        self._check_available("delete", False)
        with self._lock:
            self._objects.pop(key, None)

    # ------------------------------------------------------------------ fault injection

    def corrupt(self, key: str, index: int = -1) -> None:
        """Flip one byte of the object at ``key`` (the last by default)."""
        with self._lock:
            data = bytearray(self._objects[key])
            data[index] ^= 0xFF
            self._objects[key] = bytes(data)

    def replace(self, key: str, data: bytes) -> None:
        """Overwrite ``key`` regardless of create-only rules (a misbehaving writer)."""
        with self._lock:
            self._objects[key] = bytes(data)

    def _check_available(self, action: str, fail: bool) -> None:
        if self.outage or fail:
            raise StoreUnavailableError(f"could not {action}: the in-memory store is down.")

    def key_of(self, uri: str) -> str:
        """The key of a ``mem://`` address of this store (a bare key is returned as is)."""
        if "://" not in uri:
            return uri
        head = f"{_SCHEME}{self._name}/"
        if not uri.startswith(head):
            raise CheckpointError(f"{uri} is not an address in {head}.")
        return uri[len(head) :]
