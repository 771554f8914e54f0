"""Chunks flattened into one batch of steps, shared by the on-policy learners (PPO, IMPALA).

Each chunk of T steps carries T+1 observation rows: the last is its bootstrap row (the
observation after its last step, valued but never acted in). Laid end to end, the rows of
all chunks are what one forward pass encodes; the step columns (actions, rewards, ...) have
T entries per chunk. ``StepBatch`` keeps both layouts and the index maps between them, as
SB3's rollout buffer owns the layout its GAE runs over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from coach_stream.core import ExperienceChunk

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class StepBatch:
    """The chunks' rows and steps, in the order given."""

    observations: torch.Tensor
    """Every observation row, bootstrap rows included, in the env's dtype (frames stay uint8
    until the network scales them on the trainer's device)."""
    lengths: Array
    """Steps per chunk (T)."""
    actions: torch.Tensor
    """(N,) discrete or (N, *action_shape) continuous actions."""
    rewards: Array
    terminated: Array
    log_probs: Array | None
    """The behaviour log-probs, when every chunk carries them."""

    @classmethod
    def from_chunks(cls, chunks: Sequence[ExperienceChunk]) -> StepBatch:
        behaviour = [ch.log_probs for ch in chunks if ch.log_probs is not None]
        return cls(
            observations=torch.from_numpy(np.concatenate([ch.observations for ch in chunks])),
            lengths=np.array([ch.num_steps for ch in chunks]),
            actions=torch.from_numpy(np.concatenate([ch.actions for ch in chunks])),
            rewards=np.concatenate([ch.rewards for ch in chunks]),
            terminated=np.concatenate([ch.terminated for ch in chunks]),
            log_probs=np.concatenate(behaviour) if len(behaviour) == len(chunks) else None,
        )

    @property
    def size(self) -> int:
        """Steps (N): rows less one bootstrap row per chunk."""
        return int(self.lengths.sum())

    @property
    def bootstrap_rows(self) -> Array:
        """Each chunk's bootstrap row, as an index into ``observations``."""
        return np.cumsum(self.lengths + 1) - 1

    @property
    def step_rows(self) -> Array:
        """(rows,) bool: the rows an action was taken in (every row but the bootstrap ones)."""
        rows = np.ones(len(self.observations), dtype=np.bool_)
        rows[self.bootstrap_rows] = False
        return rows

    @property
    def next_rows(self) -> Array:
        """Per step, the row of the observation after it (a chunk's last: its bootstrap row)."""
        return np.flatnonzero(self.step_rows) + 1

    @property
    def chunk_ends(self) -> Array:
        """Each chunk's last step, as an index into the step columns."""
        return np.cumsum(self.lengths) - 1

    def behaviour_log_probs(self) -> torch.Tensor:
        """The behaviour log-probs; an error when a chunk came without them."""
        if self.log_probs is None:
            raise ValueError("these chunks need behaviour log-probs (ingest keeps only those)")
        return torch.from_numpy(self.log_probs)
