"""The networks: a CleanRL-style actor-critic (PPO, IMPALA), a Q-network (DQN), and the
Gaussian policies and soft Q-networks of continuous actions (PPO, SAC).

Small MLPs on purpose: CartPole-class problems are solved by 64-256 unit layers, and a
small network keeps both batched inference in workers and gradient steps in the trainer
in the sub-millisecond range on one CPU thread. Frames (3-D uint8 observations) get a CNN
torso instead (``policies.cnn``: ``network.kind``), shared by the actor-critic's heads.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from coach_stream.config import NetworkConfig
from coach_stream.envs import EnvShape
from coach_stream.errors import ConfigError
from coach_stream.policies.cnn import ImageEncoder, network_kind


def _layer(inputs: int, outputs: int, std: float, ortho: bool = True) -> nn.Linear:
    """Orthogonal init with zero bias (CleanRL's ``layer_init``), or torch's default init
    (``ortho=False``: SB3's ``ortho_init=False``)."""
    layer = nn.Linear(inputs, outputs)
    if ortho:
        nn.init.orthogonal_(layer.weight, std)
        nn.init.constant_(layer.bias, 0.0)
    return layer


def _mlp(
    inputs: int,
    config: NetworkConfig,
    outputs: int,
    out_std: float,
    hidden_sizes: tuple[int, ...] | None = None,
) -> nn.Sequential:
    """``hidden_sizes`` (default ``config.hidden_sizes``) then a linear output layer."""
    activation: type[nn.Module] = nn.Tanh if config.activation == "tanh" else nn.ReLU
    layers: list[nn.Module] = []
    width = inputs
    for hidden in config.hidden_sizes if hidden_sizes is None else hidden_sizes:
        layers += [_layer(width, hidden, float(np.sqrt(2)), config.ortho_init), activation()]
        width = hidden
    layers.append(_layer(width, outputs, out_std, config.ortho_init))
    return nn.Sequential(*layers)


def _flat(obs: torch.Tensor) -> torch.Tensor:
    """An MLP's input: flattened, float32 (a no-op for the float32 observations of most envs)."""
    return obs.flatten(1).to(torch.float32)


def _mlp_only(shape: EnvShape, config: NetworkConfig, what: str) -> None:
    kind = network_kind(shape, config)
    if kind != "mlp":
        raise ConfigError(
            f"{what} has no CNN torso yet, and these observations {shape.obs_shape} "
            f"({shape.obs_dtype}) select network.kind {kind!r}; use a discrete-action "
            "algorithm (ppo, dqn, impala) for frames, or network.kind mlp."
        )


class ActorCritic(nn.Module):
    """A categorical policy and a value function (CleanRL's ``Agent``).

    MLP kind: separate policy and value MLPs over the flat observation. CNN kinds
    (frames): one CNN encoder shared by a policy head and a value head (CleanRL's Atari
    agent, rl-starter-files' MiniGrid model), heads of ``network.head_sizes``.
    """

    def __init__(self, shape: EnvShape, config: NetworkConfig) -> None:
        super().__init__()
        kind = network_kind(shape, config)
        self.encoder: ImageEncoder | None = None
        if kind == "mlp":
            self.critic = _mlp(shape.obs_dim, config, 1, 1.0)
            self.actor = _mlp(shape.obs_dim, config, shape.num_actions, 0.01)
        else:
            self.encoder = ImageEncoder(shape, kind, config.pixels is not False)
            width, heads = self.encoder.features, config.head_sizes
            self.critic = _mlp(width, config, 1, 1.0, heads)
            self.actor = _mlp(width, config, shape.num_actions, 0.01, heads)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """What the heads see: the flat observation, or the CNN's features of a frame."""
        return _flat(obs) if self.encoder is None else self.encoder(obs)

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        value: torch.Tensor = self.critic(self.features(obs)).squeeze(-1)
        return value

    def logits_and_value(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Policy logits and values in one pass (a CNN encodes each frame once)."""
        features = self.features(obs)
        logits: torch.Tensor = self.actor(features)
        return logits, self.critic(features).squeeze(-1)

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.actor(self.features(obs))
        return logits

    def get_action_and_value(
        self, obs: torch.Tensor, action: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(action, log_prob, entropy, value); samples the action unless one is given."""
        logits, value = self.logits_and_value(obs)
        log_p = torch.log_softmax(logits, dim=-1)
        if action is None:
            action = torch.multinomial(log_p.exp(), 1).squeeze(-1)
        log_prob = log_p.gather(-1, action.long()[:, None]).squeeze(-1)
        entropy = -(log_p.exp() * log_p).sum(-1)
        return action, log_prob, entropy, value

    def evaluate(
        self, obs: torch.Tensor, rows: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_prob, entropy) of ``action`` at ``obs[rows]``, and the value of every row.

        One pass over ``obs``: a CNN encodes each frame once, although the values are
        wanted for every row (an off-policy learner bootstraps from rows it did not act
        on) and the policy terms only for ``rows``.
        """
        logits, values = self.logits_and_value(obs)
        log_p = torch.log_softmax(logits[rows], dim=-1)
        log_prob = log_p.gather(-1, action.long()[:, None]).squeeze(-1)
        entropy = -(log_p.exp() * log_p).sum(-1)
        return log_prob, entropy, values


class QNetwork(nn.Module):
    """Q(s, .) for every discrete action: an MLP, or (frames) a CNN encoder and a head
    (the Nature DQN: conv torso, fc 512, one linear layer per action)."""

    def __init__(self, shape: EnvShape, config: NetworkConfig) -> None:
        super().__init__()
        self.num_actions = shape.num_actions
        kind = network_kind(shape, config)
        self.encoder: ImageEncoder | None = None
        if kind == "mlp":
            self.net = _mlp(shape.obs_dim, config, shape.num_actions, 1.0)
        else:
            self.encoder = ImageEncoder(shape, kind, config.pixels is not False)
            width = self.encoder.features
            self.net = _mlp(width, config, shape.num_actions, 1.0, config.head_sizes)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = _flat(obs) if self.encoder is None else self.encoder(obs)
        q: torch.Tensor = self.net(features)
        return q


HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def normal_log_prob(x: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """Elementwise log N(x; mean, exp(log_std)^2) (torch.distributions, without its cost)."""
    return -0.5 * ((x - mean) / log_std.exp()) ** 2 - log_std - HALF_LOG_2PI


class GaussianActorCritic(nn.Module):
    """PPO's policy for continuous actions: a diagonal Gaussian with a state-independent
    log-std (CleanRL's ``ppo_continuous_action.py``) and a separate value MLP.

    Samples are not squashed: the env clips them (``envs.vector.ClipToBounds``) and the
    chunk keeps the raw sample, so the behaviour log-prob is exact.
    """

    def __init__(self, shape: EnvShape, config: NetworkConfig) -> None:
        super().__init__()
        _mlp_only(shape, config, "PPO's Gaussian policy")
        self.action_shape = shape.action_shape
        self.critic = _mlp(shape.obs_dim, config, 1, 1.0)
        self.actor_mean = _mlp(shape.obs_dim, config, shape.num_actions, 0.01)
        self.actor_logstd = nn.Parameter(torch.full((1, shape.num_actions), config.log_std_init))

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        value: torch.Tensor = self.critic(_flat(obs)).squeeze(-1)
        return value

    def mean_and_log_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean: torch.Tensor = self.actor_mean(_flat(obs))
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
        entropy = (0.5 + HALF_LOG_2PI + log_std).sum(-1)
        return flat.reshape(len(obs), *self.action_shape), log_prob, entropy, self.get_value(obs)

    def evaluate(
        self, obs: torch.Tensor, rows: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_prob, entropy) of ``action`` at ``obs[rows]``, and the value of every row."""
        _, log_prob, entropy, _ = self.get_action_and_value(obs[rows], action)
        return log_prob, entropy, self.get_value(obs)


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # CleanRL's SAC bounds on the policy's log-std


class SquashedGaussianActor(nn.Module):
    """SAC's policy: a Gaussian squashed by tanh and scaled to the action bounds.

    ``action_scale``/``action_bias`` are buffers, so a policy version carries the bounds
    it was trained for and a worker cannot act it against other ones.
    """

    action_scale: torch.Tensor
    action_bias: torch.Tensor

    def __init__(self, shape: EnvShape, config: NetworkConfig) -> None:
        super().__init__()
        _mlp_only(shape, config, "SAC's policy")
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
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)
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
        _mlp_only(shape, config, "SAC's Q-network")
        self.net = _mlp(shape.obs_dim + shape.num_actions, config, 1, 1.0)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        q: torch.Tensor = self.net(torch.cat([obs.flatten(1), action.flatten(1)], -1))
        return q.squeeze(-1)
