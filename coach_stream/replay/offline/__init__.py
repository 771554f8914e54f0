"""Offline algorithms, chosen by name (``replay train --algo``): one module each.

An offline algorithm learns from sampled transition batches only, and produces a policy
the existing actors can load: behaviour cloning trains the ``ActorCritic``'s actor (a PPO
policy), discrete CQL a ``QNetwork`` (a DQN policy). So its checkpoints are ordinary
policy versions: the evaluator, rollout workers and ``coach-stream status`` use them as
they are. Adding one: a module with a class following ``OfflineAlgorithm`` and one line
in ``ALGORITHMS``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

import torch

from coach_stream.config import NetworkConfig
from coach_stream.envs import EnvShape
from coach_stream.errors import ConfigError


@dataclass(frozen=True)
class OfflineConfig:
    """Hyperparameters every offline algorithm reads (each uses the ones it needs)."""

    steps: int = 3_000
    batch_size: int = 256
    learning_rate: float = 1e-3
    gamma: float = 0.99
    cql_alpha: float = 1.0
    """CQL's conservative penalty weight (logsumexp Q minus the data's Q)."""
    target_update_every: int = 200
    network: NetworkConfig = field(default_factory=NetworkConfig)
    normalize_observations: bool = False
    """Standardise observations by the dataset's mean and variance (clipped to 10); every
    published version carries them, so the evaluator and workers act through them."""


class OfflineAlgorithm(Protocol):
    policy_kind: Literal["ppo", "dqn"]
    """Which actor loads its policy (``PPOActor`` for an ActorCritic, ``DQNActor``)."""

    def update(self, batch: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """One gradient step on a batch (obs, actions, rewards, next_obs, terminated)."""

    def policy_state(self) -> dict[str, torch.Tensor]:
        """The state_dict a policy version carries."""


def _bc(shape: EnvShape, config: OfflineConfig) -> OfflineAlgorithm:
    from coach_stream.replay.offline.bc import BehaviourCloning

    return BehaviourCloning(shape, config)


def _cql(shape: EnvShape, config: OfflineConfig) -> OfflineAlgorithm:
    from coach_stream.replay.offline.cql import DiscreteCQL

    return DiscreteCQL(shape, config)


ALGORITHMS: dict[str, Callable[[EnvShape, OfflineConfig], OfflineAlgorithm]] = {
    "bc": _bc,
    "cql": _cql,
}


def make_algorithm(name: str, shape: EnvShape, config: OfflineConfig) -> OfflineAlgorithm:
    try:
        make = ALGORITHMS[name]
    except KeyError:
        raise ConfigError(
            f"Unknown offline algorithm {name!r}; use one of {', '.join(sorted(ALGORITHMS))}."
        ) from None
    return make(shape, config)
