"""DQN's replay buffer and the samples-per-insert limiter that paces the trainer.

The buffer holds single transitions (s, a, r, s', terminated) cut from chunks, the
observations in their own dtype (frames stay uint8: a quarter of float32's memory; the
network converts them on the trainer's device); a chunk
cut by a time limit keeps ``terminated=False`` so the target still bootstraps from s'.
It needs no checkpoint of its own: the experience log *is* the replay, so a restarted
trainer refills it by re-reading the log up to its stored positions.

The limiter is DeepMind Reverb's ``SampleToInsertRatio`` reduced to what one process
needs: after ``min_inserts`` transitions, each inserted transition earns
``samples_per_insert`` samples. The trainer samples only while it has budget and reads
more experience only while the budget is below ``tolerance``; so neither fast workers
(stale data, little learning per step) nor a fast learner (overfitting a small buffer)
can run away, whatever the number of workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from coach_stream.core import Collective, ExperienceChunk, Ingested
from coach_stream.trainer.collective import total_count
from coach_stream.trainer.device import to_device


@dataclass(frozen=True)
class ReplaySample:
    """A minibatch of transitions as tensors (observations in the env's dtype)."""

    observations: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_observations: torch.Tensor
    terminated: torch.Tensor

    def to(self, device: torch.device) -> ReplaySample:
        """The sample on the trainer's device (pinned-memory copies to a GPU)."""
        if device.type == "cpu":
            return self
        return ReplaySample(
            observations=to_device(self.observations, device),
            actions=to_device(self.actions, device),
            rewards=to_device(self.rewards, device),
            next_observations=to_device(self.next_observations, device),
            terminated=to_device(self.terminated, device),
        )


class ReplayBuffer:
    """A fixed-capacity ring of transitions."""

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...] = (),
        action_dtype: type[np.generic] = np.int64,
        obs_dtype: str = "float32",
    ) -> None:
        """``action_shape``/``action_dtype``: () int64 (DQN) or the Box's shape, float32 (SAC);
        ``obs_dtype``: the env's (``EnvShape.obs_dtype``)."""
        self.capacity = capacity
        self._obs = np.zeros((capacity, *obs_shape), dtype=obs_dtype)
        self._next_obs = np.zeros((capacity, *obs_shape), dtype=obs_dtype)
        self._actions = np.zeros((capacity, *action_shape), dtype=action_dtype)
        self._rewards = np.zeros(capacity, dtype=np.float32)
        self._terminated = np.zeros(capacity, dtype=np.float32)
        self._cursor = 0
        self.size = 0

    def add_chunk(self, chunk: ExperienceChunk) -> int:
        """Insert the chunk's transitions; returns how many."""
        n = chunk.num_steps
        if n == 0:
            return 0
        index = (self._cursor + np.arange(n)) % self.capacity
        obs = chunk.observations
        self._obs[index] = obs[:-1]
        self._next_obs[index] = obs[1:]
        self._actions[index] = chunk.actions.reshape(n, *self._actions.shape[1:])
        self._rewards[index] = chunk.rewards
        self._terminated[index] = chunk.terminated
        self._cursor = int((self._cursor + n) % self.capacity)
        self.size = min(self.capacity, self.size + n)
        return n

    def sample(self, batch_size: int, generator: torch.Generator) -> ReplaySample:
        """Uniform sample with replacement (torch RNG, so a checkpoint can restore it)."""
        index = torch.randint(0, self.size, (batch_size,), generator=generator).numpy()
        return ReplaySample(
            observations=torch.from_numpy(self._obs[index]),
            actions=torch.from_numpy(self._actions[index]),
            rewards=torch.from_numpy(self._rewards[index]),
            next_observations=torch.from_numpy(self._next_obs[index]),
            terminated=torch.from_numpy(self._terminated[index]),
        )


class SamplesPerInsertLimiter:
    """Keeps sampled / inserted near ``samples_per_insert`` once ``min_inserts`` is reached."""

    def __init__(self, samples_per_insert: float, min_inserts: int, tolerance: float) -> None:
        self.samples_per_insert, self.min_inserts, self.tolerance = (
            samples_per_insert,
            min_inserts,
            tolerance,
        )
        self.inserted = 0
        self.sampled = 0

    @property
    def budget(self) -> float:
        """Samples that may still be drawn for the transitions inserted so far."""
        earned = max(0, self.inserted - self.min_inserts) * self.samples_per_insert
        return earned - self.sampled

    @property
    def ratio(self) -> float:
        """Samples drawn per transition inserted after ``min_inserts`` (NaN before any):
        what the limit holds near ``samples_per_insert``; ``status`` shows it."""
        inserted = self.inserted - self.min_inserts
        return self.sampled / inserted if inserted > 0 else float("nan")

    def can_sample(self, batch_size: int) -> bool:
        return self.inserted >= self.min_inserts and self.budget >= batch_size

    def wants_inserts(self) -> bool:
        """Read more experience only while the sampling budget is nearly spent."""
        return self.inserted < self.min_inserts or self.budget < self.tolerance

    def insert(self, count: int) -> None:
        self.inserted += count

    def sample(self, count: int) -> None:
        self.sampled += count

    def state_dict(self) -> dict[str, Any]:
        return {"inserted": self.inserted, "sampled": self.sampled}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inserted, self.sampled = int(state["inserted"]), int(state["sampled"])


class ReplayFed:
    """How an off-policy learner takes experience: every step into the buffer, paced by
    the limiter (DQN and SAC). The learner sets ``buffer``, ``limiter``, ``sample_size``
    (its minibatch) and ``collective`` in its constructor.

    With K trainer ranks each rank's buffer holds its partitions' share and its limiter
    paces its own sampling; a gradient step needs every rank (its gradients are averaged),
    so ``ready`` holds when every rank can sample and ``wants_data`` when any rank wants
    more inserts: both are the same on every rank, as the loop's collectives need.
    """

    buffer: ReplayBuffer
    limiter: SamplesPerInsertLimiter
    sample_size: int
    collective: Collective

    def ingest(self, chunks: Sequence[ExperienceChunk], version: int) -> Ingested:
        used = 0
        for chunk in chunks:
            used += self.buffer.add_chunk(chunk)
        self.limiter.insert(used)
        return Ingested(used)

    def refill(self, chunks: Sequence[ExperienceChunk]) -> None:
        for chunk in chunks:  # the limiter's counters come from the checkpoint instead
            self.buffer.add_chunk(chunk)

    def wants_data(self) -> bool:
        wants = self.limiter.wants_inserts()
        return wants if self.collective.world == 1 else total_count(self.collective, wants) > 0

    def ready(self) -> bool:
        ready = self.buffer.size > 0 and self.limiter.can_sample(self.sample_size)
        if self.collective.world == 1:
            return ready
        return total_count(self.collective, ready) == self.collective.world
