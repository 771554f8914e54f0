"""What the trainer loop needs from an algorithm: ingest chunks, learn, expose state.

PPO and DQN each implement it in one CleanRL-style file; the loop (``loop.py``) owns
everything they share: reading, counting, policy versions, evaluation, checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from coach_stream.core import ExperienceChunk


@dataclass(frozen=True)
class Ingested:
    """What became of one batch of chunks."""

    used_steps: int
    stale_chunks: int = 0
    stale_steps: int = 0


class Learner(Protocol):
    """One algorithm, as the trainer loop drives it."""

    def ingest(self, chunks: Sequence[ExperienceChunk], version: int) -> Ingested:
        """Take chunks read from the log; ``version`` is the newest announced version."""

    def refill(self, chunks: Sequence[ExperienceChunk]) -> None:
        """Chunks re-read from the log after a restart (replay refill; PPO ignores them)."""

    def wants_data(self) -> bool:
        """Whether the loop should read more experience before learning again."""

    def ready(self) -> bool:
        """Whether ``learn`` has something to do now."""

    def learn(self, env_steps: int) -> tuple[dict[str, float], bool]:
        """Some gradient steps; returns their metrics and whether to publish a version now."""

    @property
    def updates(self) -> int:
        """Gradient steps taken so far."""

    def policy_state_dict(self) -> Mapping[str, torch.Tensor]:
        """The weights workers act with (what a policy version holds)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed for an exact resume: networks, optimizer, counters."""

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...
