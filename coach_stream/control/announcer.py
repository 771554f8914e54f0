"""Trainer side: store a policy version, verify it, and only then announce it.

The order is the safety property. A ``PolicyVersion`` on the control topic is a promise
that ``uri`` holds exactly ``sha256``; if the write or the read-back fails (a store
outage, a rival writer, a torn upload) nothing is announced and the error surfaces to the
trainer. Version numbers are burned on any attempt, so numbers stay strictly increasing
even when an attempt leaves an unannounced object behind.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from coach_stream.checkpoints.keys import policy_key, trainer_key
from coach_stream.checkpoints.retention import (
    prune_policies,
    prune_trainer_states,
    stored_policy_versions,
)
from coach_stream.core import (
    CheckpointStore,
    ControlPublisher,
    PolicyVersion,
    RunFinished,
    StoredObject,
)
from coach_stream.errors import CheckpointError, ConfigError, IntegrityError

log = logging.getLogger(__name__)


class Announcer:
    """Writes, verifies and announces policy versions of one run, and applies retention.

    ``start_version`` forces the first number; by default the announcer continues after
    both ``last_announced`` (the newest ``PolicyVersion`` the trainer read on the control
    topic) and the highest version already in the store, so a restarted trainer never
    reuses a number. Retention is one rule (``checkpoints.retention``) applied to both
    kinds of object: ``keep_last`` policies (never the announced one) and
    ``keep_trainer_states`` trainer states.
    """

    def __init__(
        self,
        store: CheckpointStore,
        publisher: ControlPublisher,
        run_id: str,
        keep_last: int = 5,
        *,
        keep_trainer_states: int = 3,
        start_version: int | None = None,
        last_announced: PolicyVersion | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if keep_last < 1:
            raise ConfigError(
                f"keep_last={keep_last} would delete the announced policy; keep at least 1."
            )
        if keep_trainer_states < 1:
            raise ConfigError(
                f"keep_trainer_states={keep_trainer_states} would delete the state a restarted "
                "trainer resumes from; keep at least 1."
            )
        if start_version is not None and start_version < 0:
            raise ConfigError(f"start_version={start_version} is negative; versions start at 0.")
        self._store = store
        self._publisher = publisher
        self._run_id = run_id
        self._keep_last = keep_last
        self._keep_trainer_states = keep_trainer_states
        self._next: int | None = start_version
        self._last = last_announced
        self._clock = clock

    @property
    def last_announced(self) -> PolicyVersion | None:
        return self._last

    @property
    def next_version(self) -> int:
        """The number the next ``publish_policy`` uses (lists the store once, lazily)."""
        if self._next is None:
            stored = stored_policy_versions(self._store, self._run_id)
            candidates = [0]
            if stored:
                candidates.append(stored[-1] + 1)
            if self._last is not None:
                candidates.append(self._last.version + 1)
            self._next = max(candidates)
        return self._next

    def publish_policy(self, blob: bytes, trainer_step: int, env_steps: int) -> PolicyVersion:
        """Write ``blob`` create-only, read it back, announce it; then apply retention.

        Raises ``CheckpointError`` (e.g. ``StoreUnavailableError``, ``AlreadyExistsError``)
        without announcing anything, or ``DeliveryError`` if the broker did not ack.
        """
        version = self.next_version
        self._next = version + 1  # burned even if this attempt fails
        key = policy_key(self._run_id, version)
        stored = self._store.put(key, blob)
        self._verify(stored, len(blob))
        message = PolicyVersion(
            run_id=self._run_id,
            version=version,
            uri=stored.uri,
            sha256=stored.sha256,
            size=stored.size,
            trainer_step=trainer_step,
            env_steps=env_steps,
            created_at_ms=int(self._clock() * 1000),
        )
        self._publisher.publish(message)
        self._last = message
        self._housekeep(
            "policy",
            lambda: prune_policies(
                self._store, self._run_id, self._keep_last, protected=[message.version]
            ),
        )
        return message

    def save_trainer_state(self, version: int, blob: bytes) -> StoredObject:
        """Store, verify and keep the trainer's resume state for ``version``; prune old ones.

        Create-only like a policy; afterwards all but the newest ``keep_trainer_states``
        states are deleted.
        """
        stored = self._store.put(trainer_key(self._run_id, version), blob)
        self._verify(stored, len(blob))
        self._housekeep(
            "trainer state",
            lambda: prune_trainer_states(self._store, self._run_id, self._keep_trainer_states),
        )
        return stored

    def finish(self, reason: str) -> RunFinished:
        """Announce the end of the run; workers exit when they read it."""
        message = RunFinished(
            run_id=self._run_id,
            final_version=self._last.version if self._last is not None else -1,
            reason=reason,
            created_at_ms=int(self._clock() * 1000),
        )
        self._publisher.publish(message)
        return message

    def _verify(self, stored: StoredObject, size: int) -> None:
        """Read the object back: a store that lost or mangled it must not be announced."""
        data = self._store.get(stored.uri, expected_sha256=stored.sha256)
        if len(data) != size or stored.size != size:
            raise IntegrityError(
                f"checkpoint {stored.uri} holds {len(data)} bytes after writing {size}; the "
                "store truncated it, so check the store and publish again."
            )

    def _housekeep(self, what: str, prune: Callable[[], list[int]]) -> None:
        """Run one retention pass; a failure is logged, never raised (it is housekeeping)."""
        try:
            deleted = prune()
        except CheckpointError as exc:
            log.warning("%s retention for run %s skipped: %s", what, self._run_id, exc)
            return
        if deleted:
            log.debug("retention deleted %s versions %s of run %s", what, deleted, self._run_id)
