"""The trainer's resume state: what ``runs/<run_id>/trainer/<version>.pt`` holds.

Model, optimizer, counters, RNG and the reader's **positions** (next offset per
partition) are saved together with the policy version they belong to, so a trainer killed
with ``kill -9`` resumes from that version as it was: it seeks to the stored positions
and reads on from there (an off-policy replay buffer is refilled from the log behind
them). Updates made after the newest saved state (up to ``checkpoint_every`` versions'
worth) are lost and redone from the log; with ``checkpoint_every=1`` (PPO) nothing is.
The file is written with ``torch.save`` and read with ``weights_only=True``: tensors and
plain containers only, no code.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from coach_stream.errors import IntegrityError
from coach_stream.trainer.device import cpu_state_dict

FORMAT = 1


@dataclass(frozen=True)
class TrainerState:
    version: int
    positions: dict[int, int]
    env_steps: int
    counters: dict[str, int]
    learner: dict[str, Any]
    torch_rng: torch.Tensor
    generator_rng: torch.Tensor
    eval_returns: list[float]
    last_chunk_seqs: dict[str, int] = field(default_factory=dict)
    """The chunk ledger (``trainer.ledger``) at ``positions``; empty in older states."""


def state_to_bytes(state: TrainerState) -> bytes:
    buffer = io.BytesIO()
    torch.save(
        {
            "format": FORMAT,
            "version": state.version,
            "positions": {str(p): int(o) for p, o in state.positions.items()},
            "env_steps": state.env_steps,
            "counters": dict(state.counters),
            "learner": state.learner,
            "torch_rng": state.torch_rng,
            "generator_rng": state.generator_rng,
            "eval_returns": list(state.eval_returns),
            "last_chunk_seqs": dict(state.last_chunk_seqs),
        },
        buffer,
    )
    return buffer.getvalue()


def state_from_bytes(blob: bytes) -> TrainerState:
    try:
        raw: Mapping[str, Any] = torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")
        if raw.get("format") != FORMAT:
            raise ValueError(f"format {raw.get('format')!r}, expected {FORMAT}")
        return TrainerState(
            version=int(raw["version"]),
            positions={int(p): int(o) for p, o in raw["positions"].items()},
            env_steps=int(raw["env_steps"]),
            counters={str(k): int(v) for k, v in raw["counters"].items()},
            learner=dict(raw["learner"]),
            torch_rng=raw["torch_rng"],
            generator_rng=raw["generator_rng"],
            eval_returns=[float(r) for r in raw["eval_returns"]],
            last_chunk_seqs={str(k): int(v) for k, v in raw.get("last_chunk_seqs", {}).items()},
        )
    except Exception as error:
        raise IntegrityError(
            f"trainer state cannot be loaded ({error}); it is damaged or from another "
            "version of coach_stream, so restore it or use a new run id."
        ) from error


class ActorCriticState:
    """The state an actor-critic learner (PPO, IMPALA) keeps: its network, optimizer and
    step count. ``_forget_unlearned`` drops what was read but not yet learned from, which a
    resumed trainer reads again from its stored positions."""

    net: torch.nn.Module
    optimizer: torch.optim.Optimizer
    _updates: int

    @property
    def updates(self) -> int:
        """Gradient steps taken (restored with the state)."""
        return self._updates

    def policy_state_dict(self) -> Mapping[str, torch.Tensor]:
        return cpu_state_dict(self.net.state_dict())

    def state_dict(self) -> dict[str, Any]:
        return {
            "net": self.net.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "updates": self._updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
        self._updates = int(state["updates"])
        self._forget_unlearned()

    def _forget_unlearned(self) -> None:
        raise NotImplementedError
