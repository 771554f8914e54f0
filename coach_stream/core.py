"""The vocabulary of coach_stream: the records and the small interfaces the loops speak.

Read this module and you know the system. Rollout workers and the trainer reach Kafka
and the checkpoint store only through these protocols; Kafka and GCS are wired in by the
entry points (``coach_stream.cli``), an orchestrator starts a run's processes (local
subprocesses or a Nomad job; its records live in ``coach_stream.orchestrators.plan``),
and in-memory implementations live in ``coach_stream.testing`` for unit tests. An
algorithm is a ``Learner`` (trainer side) and an ``Actor`` (worker side), built from a
preset by its builder (``coach_stream.algorithms``).

The write path mirrors the read path::

    # rollout worker                            # trainer (learner: PPO, DQN, ...)
    actor.load(source.wait_for(0, timeout=60))  reader.seek(state.positions)
    with writer:                                while not done:
        while source.finished is None:              chunks = reader.read(256, timeout=0.05)
            action = actor.act(obs)                 learner.ingest(chunks, version)
            obs, ... = envs.step(action.actions)    if learner.ready():
            for chunk in chunker.add(action, ...):      metrics, publish = learner.learn(n)
                writer.write(chunk)                     if publish:
            if (newer := source.poll()):                    save_state(reader.positions())
                actor.load(newer)                           announcer.publish_policy(...)

and a checkpoint store sits between the announcer and the policy source::

    stored = store.put("runs/r1/policies/00000007.pt", blob)   # create-only
    control.publish(PolicyVersion(version=7, uri=stored.uri, sha256=stored.sha256, ...))
    ...
    blob = store.get(version.uri, expected_sha256=version.sha256)  # verified read

Every process reports progress through an ``EventSink`` (``coach_stream.events`` has the
JSON-lines and in-memory ones).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:  # annotations only: importing torch costs ~2 s, and the CLI's cheap
    import torch  # commands (status, stack, --version) import this module

# --------------------------------------------------------------------------- records

Positions = dict[int, int]
"""Next offset to read, per partition of one topic: what a trainer checkpoint stores."""


@dataclass(frozen=True, eq=False)
class ExperienceChunk:
    """Up to T consecutive steps of ONE episode of ONE environment, in columns.

    ``observations`` has T+1 rows: row ``t`` is the observation the action ``t`` was taken
    in, and the last row is the observation after the last step (the bootstrap
    observation; when ``terminated[-1]`` it is the terminal observation). A chunk ends
    early when its episode ends, so ``terminated``/``truncated`` can only be true on the
    last step. ``log_probs`` are the behaviour policy's, present for on-policy algorithms.
    ``values`` (its value estimates) is a wire field that this project's workers leave
    empty since 2026-12-07, as nothing learns from it; older logs may hold it.
    ``episode_return``/``episode_length`` are set on the chunk that ends an episode.
    """

    run_id: str
    worker_id: int
    env_index: int
    chunk_seq: int  # monotonic per (worker_id, env_index), across worker restarts too
    policy_version: int
    first_step: int  # index of this chunk's first step within its episode
    observations: npt.NDArray[np.generic]  # (T+1, *obs_shape)
    actions: npt.NDArray[np.generic]  # (T, *action_shape)
    rewards: npt.NDArray[np.float32]  # (T,)
    terminated: npt.NDArray[np.bool_]  # (T,)
    truncated: npt.NDArray[np.bool_]  # (T,)
    log_probs: npt.NDArray[np.float32] | None = None  # (T,)
    values: npt.NDArray[np.float32] | None = None  # (T,)
    episode_return: float | None = None
    episode_length: int | None = None
    created_at_ms: int = 0

    @property
    def num_steps(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def key(self) -> str:
        """The Kafka message key: per-environment order is kept by keying on it."""
        return f"{self.worker_id}/{self.env_index}"

    @property
    def episode_ended(self) -> bool:
        return bool(self.num_steps and (self.terminated[-1] or self.truncated[-1]))

    def equals(self, other: ExperienceChunk) -> bool:
        """Bit-exact equality of every field and every array (dtype and shape included)."""
        for field in dataclasses.fields(self):
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            if isinstance(mine, np.ndarray) or isinstance(theirs, np.ndarray):
                if not (
                    isinstance(mine, np.ndarray)
                    and isinstance(theirs, np.ndarray)
                    and mine.dtype == theirs.dtype
                    and mine.shape == theirs.shape
                    and mine.tobytes() == theirs.tobytes()
                ):
                    return False
            elif mine != theirs:
                return False
        return True


@dataclass(frozen=True, slots=True)
class EncodedChunk:
    """An ``ExperienceChunk`` already in its wire form (the bytes ``codec.encode_chunk``
    makes of it), with what the writer and the worker need of it: a rollout worker's chunker
    writes these straight from its columns (``codec.compiled``)."""

    key: str  # ExperienceChunk.key: "<worker_id>/<env_index>"
    chunk_seq: int
    value: bytes
    episode_return: float | None = None  # set on the chunk that ends an episode


@dataclass(frozen=True)
class PolicyVersion:
    """Announced on the control topic once the checkpoint at ``uri`` is stored and verified."""

    run_id: str
    version: int
    uri: str
    sha256: str
    size: int
    trainer_step: int
    env_steps: int
    created_at_ms: int


@dataclass(frozen=True)
class RunFinished:
    """The last control message of a run: workers exit cleanly when they read it."""

    run_id: str
    final_version: int
    reason: str  # "target_reached" | "budget_exhausted" | "stopped" | ...
    created_at_ms: int


@dataclass(frozen=True)
class EvaluationReport:
    """Greedy-policy returns measured by the evaluator; the trainer ends the run on it.

    It travels on the control topic so that the trainer (which decides when a run is
    done), ``coach-stream status`` and a detached launcher all see the same evidence.
    Rollout workers ignore it.
    """

    run_id: str
    policy_version: int
    env_steps: int  # env steps the trainer had consumed when it published policy_version
    returns: tuple[float, ...]  # the episodes played with policy_version, in order
    created_at_ms: int

    @property
    def mean_return(self) -> float:
        return sum(self.returns) / len(self.returns) if self.returns else float("nan")


@dataclass(frozen=True)
class TrainerRendezvous:
    """Where rank 0 of the run's ``world`` data-parallel trainers listens (``HOST:PORT``).

    Announced when rank 0 starts on a node the orchestrator picked (Nomad): the other ranks
    join the newest one. Rollout workers and the evaluator ignore it.
    """

    run_id: str
    address: str
    world: int
    created_at_ms: int


ControlMessage = PolicyVersion | RunFinished | EvaluationReport | TrainerRendezvous


@dataclass(frozen=True)
class StoredObject:
    """What a create-only checkpoint write returns."""

    uri: str
    sha256: str
    size: int


@dataclass(frozen=True)
class LoadedPolicy:
    """A verified policy version, ready to act with."""

    version: PolicyVersion
    state_dict: Mapping[str, object]  # torch tensors, loaded with weights_only=True


class Mode(enum.StrEnum):
    SYNC = "sync"  # on-policy: trainer waits for version v's quota, workers wait for v+1
    ASYNC = "async"  # off-policy: nobody waits


@dataclass(frozen=True)
class Action:
    """One step's actions for every env, with the behaviour log-probabilities that PPO's
    ratio and IMPALA's importance weights need.

    No value estimates: PPO and IMPALA take V(x) from the network they learn with (the
    version's own, for PPO), so a worker's critic pass would be CPU spent for nothing.
    """

    actions: npt.NDArray[np.int64] | npt.NDArray[np.float32]
    """int64 (N,) for discrete actions; float32 (N, *action_shape) for continuous ones."""
    log_probs: npt.NDArray[np.float32] | None = None


@dataclass(frozen=True)
class Ingested:
    """What a learner did with one batch of chunks (the trainer counts the stale ones)."""

    used_steps: int
    stale_chunks: int = 0
    stale_steps: int = 0


EventSink = Callable[[str, Mapping[str, object]], None]
"""``sink(event, fields)``: report one event such as "progress" or "finished"."""


# --------------------------------------------------------------------------- protocols


class _Closeable(Protocol):
    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class ClosingContext:
    """Implementation mixin: ``with client:`` closes the client on the way out."""

    def close(self) -> None:
        """Release what the object holds; calling it twice is harmless."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class ExperienceWriter(_Closeable, Protocol):
    """The write side of the experience log (a rollout worker's only output)."""

    def write(self, chunk: ExperienceChunk) -> None:
        """Queue one chunk; delivery errors surface on a later call or on flush, never lost."""

    def write_encoded(self, record: EncodedChunk) -> None:
        """Queue one chunk already encoded (as ``write``, without encoding it again)."""

    def flush(self, timeout: float | None = None) -> None:
        """Block until every queued chunk is acknowledged (or raise)."""

    def next_chunk_seqs(self, worker_id: int, num_envs: int) -> list[int]:
        """Per env of ``worker_id``: one past its last ``chunk_seq`` in the log (0 if none).

        A (re)starting worker continues there, so ``chunk_seq`` stays monotonic per
        (worker_id, env_index) across restarts.
        """

    def acknowledged(self) -> Mapping[str, int]:
        """Per chunk key (``"<worker_id>/<env_index>"``): the last ``chunk_seq`` the log has
        acknowledged. Reported in the worker's progress, so "nothing acknowledged was lost"
        can be checked against the log (the fault drills do)."""


class ExperienceReader(_Closeable, Protocol):
    """The read side: yields decoded chunks, and can save and restore its place."""

    def read(self, max_chunks: int, timeout: float) -> list[ExperienceChunk]:
        """Up to ``max_chunks`` chunks, waiting at most ``timeout`` seconds for the first."""

    def positions(self) -> Positions:
        """Next offset per partition: everything before it was returned or dead-lettered."""

    def seek(self, positions: Mapping[int, int]) -> None:
        """Continue from ``positions`` (as returned by ``positions()`` earlier)."""

    def commit(self) -> None:
        """Record the current positions in the broker, for lag tools (not for resume)."""

    @property
    def dead_lettered(self) -> int:
        """Records set aside so far instead of returned: undecodable, or not fitting the run."""


class SourceRun(Protocol):
    """The run whose experience a shadow learner reads (``coach-stream attach``): the shadow
    ends when that run has ended and it has read everything the run's workers wrote."""

    def exhausted(self) -> bool:
        """Whether the source run finished and every record of its experience was read."""


class ExperienceBacklog(Protocol):
    """How far the trainer's reading trails the experience log: an ASYNC worker's brake.

    Reverb's rate limiter blocks a writer that is too far ahead of the learner; here the
    writer asks the log (where the trainer records its read positions) and waits itself.
    """

    def unread(self) -> int | None:
        """Records in the log past the trainer's last recorded read position (all writers);
        None when unknown (nothing recorded yet, or the log did not answer)."""


class CheckpointStore(Protocol):
    """Create-only blob store for policies and trainer state (GCS or a local directory)."""

    def uri(self, key: str) -> str:
        """The full address of ``key`` (``gs://bucket/prefix/key`` or ``file:///dir/key``)."""

    def put(self, key: str, data: bytes) -> StoredObject:
        """Write ``data`` under ``key`` only if absent; raise ``AlreadyExistsError`` if not."""

    def get(self, uri: str, expected_sha256: str | None = None) -> bytes:
        """Read an object; raise ``IntegrityError`` if its sha256 differs from the expected."""

    def list(self, prefix: str) -> list[str]:
        """Keys under ``prefix``, sorted."""

    def delete(self, key: str) -> None: ...


class ControlPublisher(_Closeable, Protocol):
    """Trainer side of the control topic."""

    def publish(self, message: ControlMessage) -> None:
        """Append a message and wait until the broker has it."""


class ControlSubscriber(_Closeable, Protocol):
    """Worker side of the control topic: every message in order, from the beginning."""

    def poll(self, timeout: float) -> list[ControlMessage]:
        """Messages that arrived since the last call (waiting at most ``timeout``)."""


class ControlLogReader(ControlSubscriber, Protocol):
    """A ``ControlSubscriber`` that can also catch up to the topic's current end (the
    trainer reads every evaluation and ``RunFinished`` before it resumes)."""

    def read_to_end(self, timeout: float) -> list[ControlMessage]:
        """Every message not yet returned, up to the end the topic had when called."""


class PolicySource(Protocol):
    """Where a rollout worker gets its policy: announcements in, verified weights out."""

    def latest(self, timeout: float) -> LoadedPolicy | None:
        """Read the control topic to its current end and load the newest version there."""

    def poll(self) -> LoadedPolicy | None:
        """Non-blocking: a newer verified policy than the last returned one, or None."""

    def wait_for(self, version: int, timeout: float) -> LoadedPolicy:
        """Block until a version >= ``version`` is loaded (SYNC), or raise TimeoutError."""

    @property
    def finished(self) -> RunFinished | None:
        """The RunFinished message once it has been read."""


class Actor(Protocol):
    """A policy as the rollout loop uses it: batched acting, weights swapped per version."""

    version: int

    def load(self, policy: LoadedPolicy) -> None:
        """Swap in new weights (raises ``IntegrityError`` and keeps the old ones if bad)."""

    def act(self, obs: npt.NDArray[np.generic]) -> Action:
        """Actions for a batch of observations (one row per env), in one forward pass."""


class Learner(Protocol):
    """One algorithm, as the trainer loop drives it (the loop owns what they share)."""

    def ingest(self, chunks: Sequence[ExperienceChunk], version: int) -> Ingested:
        """Take chunks read from the log; ``version`` is the newest announced version."""

    def refill(self, chunks: Sequence[ExperienceChunk]) -> None:
        """Chunks re-read from the log after a restart (replay refill; PPO ignores them)."""

    def wants_data(self) -> bool:
        """Whether the loop should read more experience before learning again."""

    def ready(self) -> bool:
        """Whether ``learn`` has something to do now."""

    def learn(self, env_steps: int) -> tuple[dict[str, float], bool]:
        """Some gradient steps: their metrics (bare names; the loop files them under
        ``train/``) and whether to publish a policy version now."""

    @property
    def updates(self) -> int:
        """Gradient steps taken so far."""

    def policy_state_dict(self) -> Mapping[str, torch.Tensor]:
        """The weights workers act with (what a policy version holds)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed for an exact resume: networks, optimizer, counters."""

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class Collective(Protocol):
    """What data-parallel trainer ranks agree on (``trainer/collective.py``): ``Solo`` for
    one trainer, ``TorchCollective`` (gloo, NCCL) for K. Every rank calls each method in the
    same order: they are collectives, a rank that skips one leaves the others waiting."""

    rank: int
    world: int

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """The element-wise sum of every rank's ``values`` (a float64 or float32 tensor)."""

    def broadcast_object(self, value: Any) -> Any:
        """Rank 0's ``value``, on every rank."""

    def gather_objects(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order, on every rank."""


class Rendezvous(Protocol):
    """Where data-parallel trainer ranks meet (``trainer/rendezvous.py``): rank 0 listens
    and says where, the others find it (an address given to all, or one announced)."""

    def listen_address(self) -> tuple[str, int]:
        """Where rank 0 listens (on its own node)."""

    def announce(self, address: tuple[str, int]) -> None:
        """Rank 0, once listening at ``address``: tell the other ranks."""

    def find_rank0(self, timeout_s: float) -> tuple[str, int] | None:
        """Where rank 0 listens, as newly as known (None: not known within ``timeout_s``)."""
