"""The two networks: a CleanRL-style actor-critic (PPO) and a Q-network (DQN).

Small MLPs on purpose: CartPole-class problems are solved by 64-256 unit layers, and a
small network keeps both batched inference in workers and gradient steps in the trainer
in the sub-millisecond range on one CPU thread.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from coach_stream.config import NetworkConfig
from coach_stream.envs import EnvShape


def _layer(inputs: int, outputs: int, std: float) -> nn.Linear:
    """Orthogonal init with zero bias (CleanRL's ``layer_init``)."""
    layer = nn.Linear(inputs, outputs)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, 0.0)
    return layer


def _mlp(inputs: int, config: NetworkConfig, outputs: int, out_std: float) -> nn.Sequential:
    activation: type[nn.Module] = nn.Tanh if config.activation == "tanh" else nn.ReLU
    layers: list[nn.Module] = []
    width = inputs
    for hidden in config.hidden_sizes:
        layers += [_layer(width, hidden, float(np.sqrt(2))), activation()]
        width = hidden
    layers.append(_layer(width, outputs, out_std))
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """Separate policy and value MLPs over a flat observation (CleanRL's ``Agent``)."""

    def __init__(self, shape: EnvShape, config: NetworkConfig) -> None:
        super().__init__()
        self.critic = _mlp(shape.obs_dim, config, 1, 1.0)
        self.actor = _mlp(shape.obs_dim, config, shape.num_actions, 0.01)

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        value: torch.Tensor = self.critic(obs.flatten(1)).squeeze(-1)
        return value

    def log_policy(self, obs: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of every action (a categorical policy over the logits)."""
        return torch.log_softmax(self.actor(obs.flatten(1)), dim=-1)

    def get_action_and_value(
        self, obs: torch.Tensor, action: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(action, log_prob, entropy, value); samples the action unless one is given."""
        log_p = self.log_policy(obs)
        if action is None:
            action = torch.multinomial(log_p.exp(), 1).squeeze(-1)
        log_prob = log_p.gather(-1, action.long()[:, None]).squeeze(-1)
        entropy = -(log_p.exp() * log_p).sum(-1)
        return action, log_prob, entropy, self.get_value(obs)


class QNetwork(nn.Module):
    """Q(s, .) for every discrete action."""

    def __init__(self, shape: EnvShape, config: NetworkConfig) -> None:
        super().__init__()
        self.num_actions = shape.num_actions
        self.net = _mlp(shape.obs_dim, config, shape.num_actions, 1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        q: torch.Tensor = self.net(obs.flatten(1))
        return q
