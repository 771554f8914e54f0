"""``core.ExperienceChunk`` <-> Avro ``io.coachstream.ExperienceChunk`` single-object bytes.

The column invariants of a chunk (T+1 observations, T of everything else, float32 rewards,
bool flags that can only be set on the last step) are checked on both sides: a writer
learns about a malformed chunk where it is made, a reader never hands one to a learner.
``ChunkSpec`` adds what only the run knows (its id, observation shape and dtype, action
count): the trainer's reader checks it at the door.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt

from coach_stream.codec import tensors
from coach_stream.codec.avro import AVRO_INT_LIMIT, AVRO_LONG_LIMIT, MAGIC, SingleObjectCodec
from coach_stream.codec.fastpath import V1_FINGERPRINT, ChunkReaderV1, ChunkWriterV1
from coach_stream.codec.registry import SchemaRegistry, SchemaVersion
from coach_stream.core import ExperienceChunk
from coach_stream.errors import CoachStreamError, DecodeError, EncodeError, InvalidChunkError

CHUNK_SCHEMA = "io.coachstream.ExperienceChunk"
_ARRAYS = ("observations", "actions", "rewards", "terminated", "truncated")
_OPTIONAL_ARRAYS = ("log_probs", "values")
FIELD_LIMITS = {
    "worker_id": AVRO_INT_LIMIT,
    "env_index": AVRO_INT_LIMIT,
    "chunk_seq": AVRO_LONG_LIMIT,
    "policy_version": AVRO_LONG_LIMIT,
    "first_step": AVRO_LONG_LIMIT,
}
"""A chunk's integer fields and their wire limits: each is in ``0..limit - 1`` (Avro int or
long); every decoder of the codec (``fastpath``, ``columnar``) checks these."""


def check_chunk(chunk: ExperienceChunk, error: type[CoachStreamError]) -> None:
    """Raise ``error`` naming the first column that breaks the chunk's invariants."""
    steps = chunk.rewards.shape[0] if chunk.rewards.ndim == 1 else -1

    def fail(message: str) -> None:
        raise error(
            f"Inconsistent ExperienceChunk (worker {chunk.worker_id}, env "
            f"{chunk.env_index}, seq {chunk.chunk_seq}): {message}."
        )

    if steps < 0:
        fail(f"rewards must have shape (T,), got {chunk.rewards.shape}")
    for name, limit in FIELD_LIMITS.items():
        if not 0 <= getattr(chunk, name) < limit:
            fail(f"{name} is {getattr(chunk, name)}, outside 0..{limit - 1}")
    expected: list[tuple[str, npt.NDArray[Any] | None, int, np.dtype[Any] | None]] = [
        ("observations", chunk.observations, steps + 1, None),
        ("actions", chunk.actions, steps, None),
        ("rewards", chunk.rewards, steps, np.dtype(np.float32)),
        ("terminated", chunk.terminated, steps, np.dtype(np.bool_)),
        ("truncated", chunk.truncated, steps, np.dtype(np.bool_)),
        ("log_probs", chunk.log_probs, steps, np.dtype(np.float32)),
        ("values", chunk.values, steps, np.dtype(np.float32)),
    ]
    for name, array, rows, dtype in expected:
        if array is None:
            continue
        if array.ndim == 0 or array.shape[0] != rows:
            fail(f"{name} must have {rows} rows, got shape {array.shape}")
        if dtype is not None and (array.dtype != dtype or array.ndim != 1):
            fail(f"{name} must be {dtype.name} of shape ({rows},), got {array.dtype}{array.shape}")
    # bool (T,) columns here: a flag before the last step means more set flags than the
    # last step's own (count_nonzero is ~5x cheaper than slicing and any() on small chunks)
    if steps > 1 and (
        np.count_nonzero(chunk.terminated) > chunk.terminated[-1]
        or np.count_nonzero(chunk.truncated) > chunk.truncated[-1]
    ):
        fail("terminated/truncated is set before the last step (a chunk holds one episode)")


@dataclass(frozen=True)
class ChunkSpec:
    """What every chunk of one run must look like; the trainer checks it at its door.

    A chunk can decode and keep its own column invariants yet not fit the run: another
    run's id, another environment's observations, an action outside the action space.
    Handed to a learner it crashes the trainer (the replay buffer cannot store it), which
    restarts, reads the same record and crashes again, forever. Checked before, it is
    dead-lettered with the reason like an undecodable record.
    """

    run_id: str
    obs_shape: tuple[int, ...]
    obs_dtype: str
    num_actions: int
    """Discrete actions: each must be in ``[0, num_actions)``."""
    action_dtype: str = "int64"
    """What every rollout worker writes (``Chunker``); learners index with it."""
    action_shape: tuple[int, ...] = ()
    """Continuous actions: each step's action has this shape (float32); () is discrete."""
    action_bounds: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    """Continuous actions that must lie within (low, high) per element: set for policies
    that squash into the bounds (SAC). A Gaussian PPO policy writes its unclipped sample
    (the env clips it), so only finiteness is checked for it."""

    def check(self, chunk: ExperienceChunk) -> None:
        """Raise ``InvalidChunkError`` naming the first way ``chunk`` does not fit the run."""
        if chunk.run_id != self.run_id:
            self._fail(chunk, f"run_id is {chunk.run_id!r}")
        check_chunk(chunk, InvalidChunkError)  # column lengths and flag/reward dtypes
        obs, actions, steps = chunk.observations, chunk.actions, chunk.num_steps
        if steps == 0:  # no worker writes one; PPO's batch would misplace its bootstrap row
            self._fail(chunk, "it holds no steps")
        if obs.shape[1:] != self.obs_shape or obs.dtype != np.dtype(self.obs_dtype):
            self._fail(
                chunk,
                f"observations are {obs.dtype}{obs.shape}, the run's are "
                f"{self.obs_dtype}{(steps + 1, *self.obs_shape)}",
            )
        if actions.shape != (steps, *self.action_shape) or actions.dtype != np.dtype(
            self.action_dtype
        ):
            self._fail(
                chunk,
                f"actions are {actions.dtype}{actions.shape}, the run's are "
                f"{self.action_dtype}{(steps, *self.action_shape)}",
            )
        if self.action_shape:
            self._check_continuous(chunk)
        elif actions.min() < 0 or actions.max() >= self.num_actions:
            self._fail(
                chunk,
                f"actions span {actions.min()}..{actions.max()}, outside the run's "
                f"0..{self.num_actions - 1}",
            )
        # a NaN observation, reward or log-prob makes every later loss NaN: the model is
        # lost silently (integer frames cannot hold one, so they are not scanned)
        if obs.dtype.kind == "f" and not np.isfinite(obs).all():
            self._fail(chunk, "observations hold NaN or infinity")
        if not np.isfinite(chunk.rewards).all():
            self._fail(chunk, "rewards hold NaN or infinity")
        if chunk.log_probs is not None and not np.isfinite(chunk.log_probs).all():
            self._fail(chunk, "log_probs hold NaN or infinity")
        # the mean training return every progress event reports
        if chunk.episode_return is not None and not math.isfinite(chunk.episode_return):
            self._fail(chunk, f"episode_return is {chunk.episode_return}")

    def _check_continuous(self, chunk: ExperienceChunk) -> None:
        actions = chunk.actions.reshape(chunk.num_steps, -1)
        if not np.isfinite(actions).all():
            self._fail(chunk, "actions hold NaN or infinity")
        if self.action_bounds is None:
            return
        low, high = (np.asarray(b, dtype=np.float32) for b in self.action_bounds)
        slack = 1e-5 * np.maximum(1.0, high - low)  # float32 rounding of a squashed action
        if (actions < low - slack).any() or (actions > high + slack).any():
            self._fail(
                chunk,
                f"actions span {actions.min():.4g}..{actions.max():.4g}, outside the run's "
                f"bounds {self.action_bounds[0]}..{self.action_bounds[1]}",
            )

    def _fail(self, chunk: ExperienceChunk, why: str) -> NoReturn:
        raise InvalidChunkError(
            f"Chunk (worker {chunk.worker_id}, env {chunk.env_index}, seq {chunk.chunk_seq}) "
            f"does not fit run {self.run_id!r}: {why}."
        )


class ChunkCodec:
    """Encodes with the newest ExperienceChunk schema; decodes every registered version."""

    def __init__(
        self, registry: SchemaRegistry | None = None, reader: SchemaVersion | None = None
    ) -> None:
        registry = registry or SchemaRegistry.load()
        self._codec = SingleObjectCodec(registry, reader or registry.latest(CHUNK_SCHEMA))
        fingerprint = self._codec.reader.fingerprint
        self._fast = ChunkWriterV1(MAGIC + fingerprint) if fingerprint == V1_FINGERPRINT else None
        # v1 bytes map onto core.ExperienceChunk whatever the reader version: v2+ only adds
        # fields with defaults that core does not carry.
        self._fast_reader = (
            ChunkReaderV1() if registry.by_fingerprint(V1_FINGERPRINT) is not None else None
        )

    @property
    def schema(self) -> SchemaVersion:
        """The schema this codec writes (and resolves every older or newer version to)."""
        return self._codec.reader

    def encode(self, chunk: ExperienceChunk) -> bytes:
        check_chunk(chunk, EncodeError)
        if self._fast is not None:
            return self._fast.encode(chunk)
        return self.encode_generic(chunk)

    def encode_generic(self, chunk: ExperienceChunk) -> bytes:
        """The same bytes through fastavro, for any schema version (the reference path)."""
        record: dict[str, Any] = {
            "run_id": chunk.run_id,
            "worker_id": chunk.worker_id,
            "env_index": chunk.env_index,
            "chunk_seq": chunk.chunk_seq,
            "policy_version": chunk.policy_version,
            "first_step": chunk.first_step,
            "episode_return": chunk.episode_return,
            "episode_length": chunk.episode_length,
            "created_at_ms": chunk.created_at_ms,
        }
        for name in _ARRAYS:
            record[name] = tensors.to_avro(getattr(chunk, name), name)
        for name in _OPTIONAL_ARRAYS:
            value = getattr(chunk, name)
            record[name] = None if value is None else tensors.to_avro(value, name)
        return self._codec.encode(record)

    def decode(self, data: bytes) -> ExperienceChunk:
        if (
            self._fast_reader is not None
            and data[2:10] == V1_FINGERPRINT
            and data[:2] == MAGIC
            and isinstance(data, bytes)
        ):
            try:
                chunk = self._fast_reader.decode(data)
            except Exception:  # Unusual, IndexError, UnicodeDecodeError: let fastavro decide
                pass
            else:
                check_chunk(chunk, DecodeError)
                return chunk
        return self.decode_generic(data)

    def decode_generic(self, data: bytes) -> ExperienceChunk:
        """Decode through fastavro with schema resolution (the reference path)."""
        record = self._codec.decode(data)
        from_avro = tensors.from_avro
        log_probs, values = record["log_probs"], record["values"]
        chunk = ExperienceChunk(
            run_id=record["run_id"],
            worker_id=record["worker_id"],
            env_index=record["env_index"],
            chunk_seq=record["chunk_seq"],
            policy_version=record["policy_version"],
            first_step=record["first_step"],
            observations=from_avro(record["observations"], "observations"),
            actions=from_avro(record["actions"], "actions"),
            rewards=from_avro(record["rewards"], "rewards"),
            terminated=from_avro(record["terminated"], "terminated"),
            truncated=from_avro(record["truncated"], "truncated"),
            log_probs=None if log_probs is None else from_avro(log_probs, "log_probs"),
            values=None if values is None else from_avro(values, "values"),
            episode_return=record["episode_return"],
            episode_length=record["episode_length"],
            created_at_ms=record["created_at_ms"],
        )
        check_chunk(chunk, DecodeError)
        return chunk
