"""Checkpoint key names and the content hash, in one place.

Trainer, workers, retention and the status tools must agree on where version ``v`` of a
run lives; spelling the layout once here keeps them from drifting apart. Zero-padded
version numbers make lexical order equal numeric order, so a plain sorted listing is
already oldest-first.
"""

from __future__ import annotations

import hashlib
import re

from coach_stream.errors import CheckpointError, IntegrityError
from coach_stream.runids import check_run_id

_VERSIONED = re.compile(r"^runs/(?P<run>[^/]+)/(?:policies|trainer)/(?P<version>\d{8,})\.pt$")


def _checked_run_id(run_id: str) -> str:
    return check_run_id(run_id, CheckpointError)


def _checked_version(version: int) -> int:
    if version < 0:
        raise CheckpointError(f"policy version {version} is negative; versions start at 0.")
    return version


def policies_prefix(run_id: str) -> str:
    """Where every policy version of ``run_id`` lives (ends with ``/``)."""
    return f"runs/{_checked_run_id(run_id)}/policies/"


def trainer_prefix(run_id: str) -> str:
    """Where the trainer's resume state of ``run_id`` lives (ends with ``/``)."""
    return f"runs/{_checked_run_id(run_id)}/trainer/"


def policy_key(run_id: str, version: int) -> str:
    """``runs/<run_id>/policies/<version:08d>.pt``: the weights workers load."""
    return f"{policies_prefix(run_id)}{_checked_version(version):08d}.pt"


def trainer_key(run_id: str, version: int) -> str:
    """``runs/<run_id>/trainer/<version:08d>.pt``: model, optimizer, RNG and offsets."""
    return f"{trainer_prefix(run_id)}{_checked_version(version):08d}.pt"


def version_of(key: str) -> int | None:
    """The version number in a policy or trainer key, or None for any other key."""
    match = _VERSIONED.match(key)
    return int(match["version"]) if match else None


def sha256_hex(data: bytes) -> str:
    """The content hash announced with every policy version and checked on every read."""
    return hashlib.sha256(data).hexdigest()


def verify_sha256(data: bytes, expected: str | None, where: str) -> bytes:
    """``data`` if it hashes to ``expected`` (None: nothing announced, nothing to check).

    The one check every store's ``get`` makes, so a mismatch reads the same wherever the
    bytes came from: ``IntegrityError`` naming the object and both hashes.
    """
    if expected is not None:
        actual = sha256_hex(data)
        if actual != expected:
            raise IntegrityError(
                f"checkpoint {where} has sha256 {actual[:12]}… but {expected[:12]}… was "
                "announced; it is corrupt or was replaced, so publish it again as a new version."
            )
    return data


def check_key(key: str) -> str:
    """Reject keys that could escape the store's root or prefix (``..``, absolute, empty)."""
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise CheckpointError(
            f"checkpoint key {key!r} is not a relative path of plain names; "
            "build keys with coach_stream.checkpoints.policy_key or trainer_key."
        )
    return key
