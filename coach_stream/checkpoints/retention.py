"""Retention, one rule for policies and trainer state: keep the last K versions of a run.

The rule: of the versions stored under a run's ``policies/`` (or ``trainer/``) prefix,
delete all but the ``keep_last`` highest numbers and the ``protected`` ones. Deleting by
version number (not by time) keeps it exact under clock skew; keys that are not versioned
objects are never touched.

- **Policies** (``keep_policies``, default 5): workers may still be fetching a version a
  little older than the newest, and a worker that joins late loads the announced one, so
  the announcer protects the announced version explicitly (orphans with higher numbers,
  written but never announced, cannot push it out).
- **Trainer state** (``keep_trainer_states``, default 3): only the newest is needed to
  resume; the older ones are a margin against a newest file that turns out unreadable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from coach_stream.checkpoints.keys import (
    policies_prefix,
    policy_key,
    trainer_key,
    trainer_prefix,
    version_of,
)
from coach_stream.core import CheckpointStore
from coach_stream.errors import ConfigError


def versions_to_delete(
    versions: Iterable[int], keep_last: int, protected: Iterable[int] = ()
) -> list[int]:
    """The versions retention removes: all but the ``keep_last`` newest and ``protected``."""
    if keep_last < 1:
        raise ConfigError(
            f"keep_last={keep_last} would delete every checkpoint; keep at least 1 version."
        )
    ordered = sorted(set(versions))
    keep = set(ordered[-keep_last:]) | set(protected)
    return [v for v in ordered if v not in keep]


def _stored_versions(store: CheckpointStore, prefix: str) -> list[int]:
    found = (version_of(key) for key in store.list(prefix))
    return sorted(v for v in found if v is not None)


def _prune(
    store: CheckpointStore,
    prefix: str,
    key: Callable[[int], str],
    keep_last: int,
    protected: Iterable[int],
) -> list[int]:
    doomed = versions_to_delete(_stored_versions(store, prefix), keep_last, protected)
    for version in doomed:
        store.delete(key(version))
    return doomed


def stored_policy_versions(store: CheckpointStore, run_id: str) -> list[int]:
    """Versions with a policy object in ``store``, oldest first."""
    return _stored_versions(store, policies_prefix(run_id))


def stored_trainer_versions(store: CheckpointStore, run_id: str) -> list[int]:
    """Versions with a trainer-state object in ``store``, oldest first."""
    return _stored_versions(store, trainer_prefix(run_id))


def prune_policies(
    store: CheckpointStore, run_id: str, keep_last: int, protected: Iterable[int] = ()
) -> list[int]:
    """Delete old policy versions of ``run_id``; returns the versions deleted."""
    return _prune(
        store, policies_prefix(run_id), lambda v: policy_key(run_id, v), keep_last, protected
    )


def prune_trainer_states(store: CheckpointStore, run_id: str, keep_last: int) -> list[int]:
    """Delete old trainer states of ``run_id``; returns the versions deleted."""
    return _prune(store, trainer_prefix(run_id), lambda v: trainer_key(run_id, v), keep_last, ())
