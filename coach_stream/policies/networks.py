"""The two networks: a CleanRL-style actor-critic (PPO) and a Q-network (DQN).

Small MLPs on purpose: CartPole-class problems are solved by 64-256 unit layers, and a
small network keeps both batched inference in workers and gradient steps in the trainer
in the sub-millisecond range on one CPU thread.
"""

from __future__ import annotations

import math

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


_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def normal_log_prob(x: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """Elementwise log N(x; mean, exp(log_std)^2) (torch.distributions, without its cost)."""
    return -0.5 * ((x - mean) / log_std.exp()) ** 2 - log_std - _HALF_LOG_2PI


class GaussianActorCritic(nn.Module):
    """PPO's policy for continuous actions: a diagonal Gaussian with a state-independent
    log-std (CleanRL's ``ppo_continuous_action.py``) and a separate value MLP.

    Samples are not squashed: the env clips them (``envs.vector.ClipToBounds``) and the
    chunk keeps the raw sample, so the behaviour log-prob is exact.
    """

    def __init__(self, shape: EnvShape, config: NetworkConfig) -> None:
        super().__init__()
        self.action_shape = shape.action_shape
        self.critic = _mlp(shape.obs_dim, config, 1, 1.0)
        self.actor_mean = _mlp(shape.obs_dim, config, shape.num_actions, 0.01)
        self.actor_logstd = nn.Parameter(torch.zeros(1, shape.num_actions))

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        value: torch.Tensor = self.critic(obs.flatten(1)).squeeze(-1)
        return value

    def mean_and_log_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean: torch.Tensor = self.actor_mean(obs.flatten(1))
        return mean, self.actor_logstd.expand_as(mean)

    def get_action_and_value(
        self, obs: torch.Tensor, action: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(action, log_prob, entropy, value); log-prob and entropy summed over dimensions."""
        mean, log_std = self.mean_and_log_std(obs)
        if action is None:
            flat = mean + log_std.exp() * torch.randn_like(mean)
        else:
            flat = action.reshape(len(obs), -1)
        log_prob = normal_log_prob(flat, mean, log_std).sum(-1)
        entropy = (0.5 + _HALF_LOG_2PI + log_std).sum(-1)
        return flat.reshape(len(obs), *self.action_shape), log_prob, entropy, self.get_value(obs)


_LOG_STD_MIN, _LOG_STD_MAX = -5.0, 2.0  # CleanRL's SAC bounds on the policy's log-std


class SquashedGaussianActor(nn.Module):
    """SAC's policy: a Gaussian squashed by tanh and scaled to the action bounds.

    ``action_scale``/``action_bias`` are buffers, so a policy version carries the bounds
    it was trained for and a worker cannot act it against other ones.
    """

    action_scale: torch.Tensor
    action_bias: torch.Tensor

    def __init__(self, shape: EnvShape, config: NetworkConfig) -> None:
        super().__init__()
        self.action_shape = shape.action_shape
        self.torso = _mlp(shape.obs_dim, config, 2 * shape.num_actions, 0.01)
        low = torch.tensor(shape.action_low, dtype=torch.float32)
        high = torch.tensor(shape.action_high, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log_std) of the pre-squash Gaussian."""
        mean, log_std = self.torso(obs.flatten(1)).chunk(2, dim=-1)
        log_std = torch.tanh(log_std)
        log_std = _LOG_STD_MIN + 0.5 * (_LOG_STD_MAX - _LOG_STD_MIN) * (log_std + 1)
        return mean, log_std

    def sample(
        self, obs: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(action in the bounds, its log-prob with the tanh change of variables)."""
        mean, log_std = self(obs)
        std = log_std.exp()
        # drawn on the CPU (the seeded generator's device), then moved to the net's
        noise = torch.randn(mean.shape, generator=generator).to(mean.device)
        x = mean + std * noise  # reparameterized: gradients flow through mean and std
        y = torch.tanh(x)
        scale = self.action_scale
        action = y * scale + self.action_bias
        log_prob = normal_log_prob(x, mean, log_std)
        log_prob = log_prob - torch.log(scale * (1 - y.pow(2)) + 1e-6)
        return action, log_prob.sum(-1)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        mean, _ = self(obs)
        action = torch.tanh(mean) * self.action_scale + self.action_bias
        return action


class SoftQNetwork(nn.Module):
    """Q(s, a) for a continuous action (SAC keeps two, and a target copy of each)."""

    def __init__(self, shape: EnvShape, config: NetworkConfig) -> None:
        super().__init__()
        self.net = _mlp(shape.obs_dim + shape.num_actions, config, 1, 1.0)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        q: torch.Tensor = self.net(torch.cat([obs.flatten(1), action.flatten(1)], -1))
        return q.squeeze(-1)
