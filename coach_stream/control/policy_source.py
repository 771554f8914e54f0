"""Worker side: the newest announced policy, fetched, verified and loaded safely.

A worker must never act with weights that differ from what the trainer announced, and
must never stop acting because one checkpoint is bad. So every version is fetched,
checked against its announced sha256 and size, loaded with ``weights_only=True``, and
only then swapped in; a version that fails is rejected with a logged reason and the
current policy stays. Missing or corrupt objects are rejected for good; a store outage
is retried after ``retry_after_s``, since the object itself may be fine.

With ``background=True`` (ASYNC workers) ``poll()`` never waits for a transfer: it hands
the newest version to one fetch thread and swaps on a later ``poll()`` once the weights
are loaded, so a 50 MB checkpoint does not stall the environment loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

from coach_stream.checkpoints.serialization import policy_from_bytes
from coach_stream.core import (
    CheckpointStore,
    ClosingContext,
    ControlLogReader,
    ControlMessage,
    EvaluationReport,
    LoadedPolicy,
    PolicyVersion,
    RunFinished,
)
from coach_stream.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    IntegrityError,
    RunEndedError,
)

log = logging.getLogger(__name__)

_WAIT_SLICE_S = 0.5  # wait_for polls in slices so RunFinished and timeouts are noticed

_Outcome = LoadedPolicy | CheckpointError  # what one fetch attempt produced
_Announcement = tuple[int, str, str]
"""(version, uri, sha256): what is tried and refused. Not the version alone: anyone who can
write to the control topic could otherwise announce a bad "v+1" first and make every
worker refuse the trainer's real v+1 (the fault drills' forged PolicyVersion)."""


def _identity(message: PolicyVersion) -> _Announcement:
    return (message.version, message.uri, message.sha256)


class CheckpointPolicySource(ClosingContext):
    """``PolicySource`` over a control subscriber and a checkpoint store."""

    def __init__(
        self,
        subscriber: ControlLogReader,
        store: CheckpointStore,
        *,
        run_id: str | None = None,
        retry_after_s: float = 5.0,
        loader: Callable[[bytes], Mapping[str, object]] = policy_from_bytes,
        clock: Callable[[], float] = time.monotonic,
        background: bool = False,
    ) -> None:
        self._subscriber = subscriber
        self._store = store
        self._run_id = run_id
        self._retry_after_s = retry_after_s
        self._loader = loader
        self._clock = clock
        self._current: LoadedPolicy | None = None
        self._announced: dict[_Announcement, PolicyVersion] = {}  # newer than current
        self._latest_announced: PolicyVersion | None = None
        self._rejected: dict[int, str] = {}  # by version, for reports
        self._refused: set[_Announcement] = set()
        self._retry_at: dict[_Announcement, float] = {}
        self._finished: RunFinished | None = None
        self._evaluations: list[EvaluationReport] = []
        self._background = background
        self._executor: ThreadPoolExecutor | None = None  # created on first use
        self._inflight: tuple[PolicyVersion, Future[_Outcome]] | None = None

    # ------------------------------------------------------------------ PolicySource

    def latest(self, timeout: float) -> LoadedPolicy | None:
        self._absorb(self._subscriber.read_to_end(timeout))
        self._load_newest()
        return self._current

    def poll(self) -> LoadedPolicy | None:
        before = self._current
        self._absorb(self._subscriber.poll(0.0))
        if self._background:
            self._collect(block=False)
            self._start_fetch()
        else:
            self._load_newest()
        return self._current if self._current is not before else None

    def wait_for(self, version: int, timeout: float) -> LoadedPolicy:
        deadline = self._clock() + timeout
        polled = False
        while True:
            self._load_newest()
            if self._current is not None and self._current.version.version >= version:
                return self._current
            if self._finished is not None:
                raise RunEndedError(
                    f"run {self._finished.run_id} finished at version "
                    f"{self._finished.final_version} ({self._finished.reason}) before version "
                    f"{version} was announced; the worker should exit."
                )
            remaining = deadline - self._clock()
            # The topic is read at least once, however short the timeout: a process
            # descheduled between the deadline's start and here must not miss a version
            # that was already announced (a 10 ms wait under load did, now and then).
            if remaining <= 0 and polled:
                raise TimeoutError(self._timeout_message(version, timeout))
            self._absorb(self._subscriber.poll(max(0.0, min(remaining, _WAIT_SLICE_S))))
            polled = True

    @property
    def finished(self) -> RunFinished | None:
        return self._finished

    def join_fetch(self, timeout: float | None = None) -> None:
        """Wait for a background fetch in flight and settle it (tests, shutdown)."""
        self._collect(block=True, timeout=timeout)

    def close(self) -> None:
        """Stop the fetch thread (if one was started); the subscriber is the caller's."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
            self._inflight = None

    # ------------------------------------------------------------------ for status tools

    @property
    def current(self) -> LoadedPolicy | None:
        return self._current

    @property
    def latest_announced(self) -> PolicyVersion | None:
        """The newest version seen on the topic (policy lag = this - behaviour version)."""
        return self._latest_announced

    @property
    def rejected(self) -> Mapping[int, str]:
        """Versions refused for good, with the reason."""
        return dict(self._rejected)

    @property
    def evaluations(self) -> list[EvaluationReport]:
        """Evaluation reports read so far (workers skip them; trainers and tools use them)."""
        return list(self._evaluations)

    # ------------------------------------------------------------------ internals

    def _absorb(self, messages: list[ControlMessage]) -> None:
        for message in messages:
            if self._run_id is not None and message.run_id != self._run_id:
                log.warning(
                    "ignoring a control message of run %s on run %s's topic",
                    message.run_id,
                    self._run_id,
                )
            elif isinstance(message, PolicyVersion):
                self._note_version(message)
            elif isinstance(message, RunFinished):
                self._finished = message
            elif isinstance(message, EvaluationReport):
                self._evaluations.append(message)

    def _note_version(self, message: PolicyVersion) -> None:
        if self._latest_announced is None or message.version > self._latest_announced.version:
            self._latest_announced = message
        current = self._current.version.version if self._current is not None else -1
        identity = _identity(message)
        if message.version > current and identity not in self._refused:
            self._announced[identity] = message

    def _candidates(self) -> list[PolicyVersion]:
        """Announced versions worth trying now, newest first."""
        now = self._clock()
        return [
            self._announced[identity]
            for identity in sorted(self._announced, key=lambda i: i[0], reverse=True)
            if self._retry_at.get(identity, 0.0) <= now
        ]

    def _load_newest(self) -> None:
        """Try announced versions newest first; the first that verifies becomes current."""
        self._collect(block=True)
        for message in self._candidates():
            if self._settle(message, self._attempt(message)):
                return

    def _start_fetch(self) -> None:
        """Hand the newest candidate to the fetch thread, unless one is in flight."""
        if self._inflight is not None:
            return
        candidates = self._candidates()
        if not candidates:
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="policy-fetch")
        message = candidates[0]
        self._inflight = (message, self._executor.submit(self._attempt, message))

    def _collect(self, block: bool, timeout: float | None = None) -> None:
        if self._inflight is None:
            return
        message, future = self._inflight
        if not block and not future.done():
            return
        outcome = future.result(timeout)
        self._inflight = None
        self._settle(message, outcome)

    def _attempt(self, message: PolicyVersion) -> _Outcome:
        """Fetch, verify and load one version (may run on the fetch thread: no state here)."""
        try:
            blob = self._store.get(message.uri, expected_sha256=message.sha256)
            if len(blob) != message.size:
                raise IntegrityError(
                    f"checkpoint {message.uri} holds {len(blob)} bytes, {message.size} announced."
                )
            return LoadedPolicy(version=message, state_dict=self._loader(blob))
        except CheckpointError as exc:
            return exc

    def _settle(self, message: PolicyVersion, outcome: _Outcome) -> bool:
        """Record an attempt's outcome; True if it became the current policy."""
        keeping = self._current.version.version if self._current is not None else None
        identity = _identity(message)
        if isinstance(outcome, LoadedPolicy):
            self._retry_at.pop(identity, None)
            if keeping is not None and message.version <= keeping:
                return False
            self._current = outcome
            self._announced = {
                i: m for i, m in self._announced.items() if m.version > message.version
            }
            return True
        if isinstance(outcome, IntegrityError | CheckpointNotFoundError):
            self._rejected[message.version] = str(outcome)
            self._refused.add(identity)
            self._announced.pop(identity, None)
            log.warning(
                "rejected policy version %d (%s): %s; keeping version %s",
                message.version,
                message.uri,
                outcome,
                keeping,
            )
        else:
            self._retry_at[identity] = self._clock() + self._retry_after_s
            log.warning(
                "could not fetch policy version %d (%s): %s; keeping version %s, retry in %.0f s",
                message.version,
                message.uri,
                outcome,
                keeping,
                self._retry_after_s,
            )
        return False

    def _timeout_message(self, version: int, timeout: float) -> str:
        have = self._current.version.version if self._current is not None else None
        rejected = {v: r for v, r in self._rejected.items() if v >= version}
        detail = f"; rejected: {rejected}" if rejected else ""
        return (
            f"policy version {version} was not available within {timeout:.1f} s (have {have}"
            f"{detail}); check that the trainer is running and publishing."
        )
