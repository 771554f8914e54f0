"""Discrete CQL (Kumar et al. 2020): double-DQN targets plus the conservative penalty.

The penalty ``alpha * (logsumexp_a Q(s, a) - Q(s, a_data))`` pushes down the values of
actions the data never took, so the greedy policy stays where the data is: plain DQN on a
fixed dataset overestimates those and drifts off it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch
import torch.nn.functional as F

from coach_stream.envs import EnvShape
from coach_stream.policies.networks import QNetwork
from coach_stream.replay.offline import OfflineConfig


class DiscreteCQL:
    policy_kind: Literal["ppo", "dqn"] = "dqn"

    def __init__(self, shape: EnvShape, config: OfflineConfig) -> None:
        self.config = config
        self.q = QNetwork(shape, config.network)
        self.target = QNetwork(shape, config.network)
        self.target.load_state_dict(self.q.state_dict())
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=config.learning_rate)
        self.steps = 0

    def update(self, batch: Mapping[str, torch.Tensor]) -> dict[str, float]:
        obs, actions = batch["obs"], batch["actions"]
        q_all = self.q(obs)
        q_data = q_all.gather(1, actions[:, None]).squeeze(1)
        with torch.no_grad():
            best = self.q(batch["next_obs"]).argmax(1, keepdim=True)
            next_q = self.target(batch["next_obs"]).gather(1, best).squeeze(1)
            target = batch["rewards"] + self.config.gamma * (1 - batch["terminated"]) * next_q
        td = F.smooth_l1_loss(q_data, target)
        penalty = (torch.logsumexp(q_all, dim=1) - q_data).mean()
        loss = td + self.config.cql_alpha * penalty
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.q.parameters(), 10.0)
        self.optimizer.step()
        self.steps += 1
        if self.steps % self.config.target_update_every == 0:
            self.target.load_state_dict(self.q.state_dict())
        return {"train/loss": loss.item(), "train/td": td.item(), "train/cql": penalty.item()}

    def policy_state(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.q.state_dict().items()}
