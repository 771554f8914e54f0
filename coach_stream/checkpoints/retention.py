"""Retention: keep the last K policy versions of a run, and never the announced one.

Workers may still be fetching a version a little older than the newest, and a worker that
joins late loads the announced (latest) version, so deleting it would strand new workers.
Deleting by version number (not by time) keeps the rule exact under clock skew.
"""

from __future__ import annotations

from collections.abc import Iterable

from coach_stream.checkpoints.keys import policies_prefix, policy_key, version_of
from coach_stream.core import CheckpointStore
from coach_stream.errors import ConfigError


def policies_to_delete(
    versions: Iterable[int], keep_last: int, protected: Iterable[int] = ()
) -> list[int]:
    """The versions retention removes: all but the ``keep_last`` newest and ``protected``."""
    if keep_last < 1:
        raise ConfigError(
            f"keep_last={keep_last} would delete every policy; keep at least 1 version."
        )
    ordered = sorted(set(versions))
    keep = set(ordered[-keep_last:]) | set(protected)
    return [v for v in ordered if v not in keep]


def stored_policy_versions(store: CheckpointStore, run_id: str) -> list[int]:
    """Versions with a policy object in ``store``, oldest first."""
    found = (version_of(key) for key in store.list(policies_prefix(run_id)))
    return sorted(v for v in found if v is not None)


def prune_policies(
    store: CheckpointStore, run_id: str, keep_last: int, protected: Iterable[int] = ()
) -> list[int]:
    """Delete old policy versions of ``run_id``; returns the versions deleted."""
    doomed = policies_to_delete(stored_policy_versions(store, run_id), keep_last, protected)
    for version in doomed:
        store.delete(policy_key(run_id, version))
    return doomed
