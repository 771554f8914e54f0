"""Checkpoint stores: create-only, hash-verified blobs for policies and trainer state.

``open_store`` turns the address a user configures into a store::

    open_store("gs://my-bucket/experiments")              # real GCS, default credentials
    open_store("gs://ckpt", gcs_emulator_host="http://127.0.0.1:4443")  # fake-gcs-server
    open_store("file:///var/lib/coach/ckpt")               # a local (or NFS) directory
    open_store("./checkpoints")                            # a plain path: same as file://
"""

from __future__ import annotations

from coach_stream.checkpoints.gcs import GcsCheckpointStore
from coach_stream.checkpoints.keys import (
    policies_prefix,
    policy_key,
    sha256_hex,
    trainer_key,
    trainer_prefix,
    verify_sha256,
    version_of,
)
from coach_stream.checkpoints.local import LocalCheckpointStore
from coach_stream.checkpoints.location import GcsLocation, parse_store_url
from coach_stream.checkpoints.retention import (
    prune_policies,
    prune_trainer_states,
    stored_policy_versions,
    stored_trainer_versions,
)
from coach_stream.checkpoints.retry import RetryPolicy
from coach_stream.checkpoints.serialization import policy_from_bytes, policy_to_bytes

__all__ = [
    "GcsCheckpointStore",
    "GcsLocation",
    "LocalCheckpointStore",
    "RetryPolicy",
    "open_store",
    "parse_store_url",
    "policies_prefix",
    "policy_from_bytes",
    "policy_key",
    "policy_to_bytes",
    "prune_policies",
    "prune_trainer_states",
    "sha256_hex",
    "stored_policy_versions",
    "stored_trainer_versions",
    "trainer_key",
    "trainer_prefix",
    "verify_sha256",
    "version_of",
]


def open_store(
    url: str,
    *,
    gcs_emulator_host: str | None = None,
    gcs_project: str | None = None,
    retry: RetryPolicy | None = None,
) -> GcsCheckpointStore | LocalCheckpointStore:
    """The store at ``url``: ``gs://bucket[/prefix]``, ``file:///dir`` or a plain path
    (``parse_store_url``).

    ``gcs_emulator_host`` is the ``STORAGE_EMULATOR_HOST`` value; entry points read the
    environment and pass it in. No I/O happens until the store is first used.
    """
    where = parse_store_url(url)
    if isinstance(where, GcsLocation):
        return GcsCheckpointStore(
            where.bucket,
            where.prefix,
            emulator_host=gcs_emulator_host,
            project=gcs_project,
            retry=retry,
        )
    return LocalCheckpointStore(where)
