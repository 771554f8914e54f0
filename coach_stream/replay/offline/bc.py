"""Behaviour cloning: the ActorCritic's actor fitted to the data's actions (cross-entropy)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch
import torch.nn.functional as F

from coach_stream.envs import EnvShape
from coach_stream.policies.networks import ActorCritic
from coach_stream.replay.offline import OfflineConfig


class BehaviourCloning:
    policy_kind: Literal["ppo", "dqn"] = "ppo"

    def __init__(self, shape: EnvShape, config: OfflineConfig) -> None:
        self.net = ActorCritic(shape, config.network)
        self.optimizer = torch.optim.Adam(self.net.actor.parameters(), lr=config.learning_rate)

    def update(self, batch: Mapping[str, torch.Tensor]) -> dict[str, float]:
        logits = self.net.logits(batch["obs"])
        loss = F.cross_entropy(logits, batch["actions"])
        self.optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        self.optimizer.step()
        accuracy = (logits.argmax(-1) == batch["actions"]).float().mean()
        return {"train/loss": loss.item(), "train/accuracy": accuracy.item()}

    def policy_state(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.net.state_dict().items()}
