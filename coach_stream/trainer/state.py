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


def network_state(
    net: torch.nn.Module, optimizer: torch.optim.Optimizer, updates: int
) -> dict[str, Any]:
    """An actor-critic learner's part of the state: its network, optimizer and step count."""
    return {"net": net.state_dict(), "optimizer": optimizer.state_dict(), "updates": updates}


def load_network_state(
    state: Mapping[str, Any], net: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> int:
    """Restore ``network_state``'s parts in place; returns the step count."""
    net.load_state_dict(state["net"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["updates"])
