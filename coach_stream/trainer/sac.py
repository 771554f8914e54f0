"""Soft Actor-Critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications")
for continuous actions, after CleanRL's ``sac_continuous_action.py``.

ASYNC mode, off-policy like DQN: workers act with whatever version they hold and never
wait; every chunk goes into the replay buffer; gradient steps are paced by the
samples-per-insert limiter (``replay.py``), so learning per env step is the preset's
however many workers there are. After ``publish_every`` gradient steps the loop announces
a new version (the squashed-Gaussian actor's weights). Per gradient step::

    a', log pi(a'|s') ~ pi(s')
    y  = r + gamma * (1 - terminated) * (min_i Q_target_i(s', a') - alpha * log pi(a'|s'))
    L_Q = mse(Q_1(s, a), y) + mse(Q_2(s, a), y)
    every policy_frequency steps:
        L_pi    = mean(alpha * log pi(a~|s) - min_i Q_i(s, a~))        (reparameterized a~)
        L_alpha = mean(-log_alpha * (log pi(a~|s) + target_entropy))   (when autotune)
    Q_target_i <- tau * Q_i + (1 - tau) * Q_target_i

A chunk cut by a time limit keeps ``terminated=False``: its last transition bootstraps.
The log is the replay: a restarted trainer refills the buffer from it (``refill=True``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import optim

from coach_stream.config import FrozenModel
from coach_stream.core import Collective
from coach_stream.policies.networks import SoftQNetwork, SquashedGaussianActor
from coach_stream.trainer.collective import SOLO, average_optimizer_gradients
from coach_stream.trainer.device import CPU, cpu_state_dict
from coach_stream.trainer.replay import ReplayBuffer, ReplayFed, SamplesPerInsertLimiter


class SACConfig(FrozenModel):
    """Soft Actor-Critic for continuous actions (Haarnoja et al. 2018; CleanRL/SB3 names)."""

    policy_lr: float = Field(default=1e-3, gt=0)
    """Adam's learning rate of the policy."""
    q_lr: float = Field(default=1e-3, gt=0)
    """Adam's learning rate of the two Q-networks and of the temperature (``autotune``)."""
    buffer_size: int = Field(default=1_000_000, ge=1)
    """Transitions the replay buffer holds (the oldest are replaced)."""
    batch_size: int = Field(default=256, ge=1)
    """Transitions per gradient step."""
    gamma: float = Field(default=0.99, gt=0, le=1)
    """Discount factor of the targets."""
    tau: float = Field(default=0.005, gt=0, le=1)
    """Polyak factor of the target Q-networks, applied after every gradient step."""
    learning_starts: int = Field(default=1_000, ge=0)
    """Env steps in the buffer before the first gradient step; until the trainer has
    consumed this many, workers act uniformly at random in the bounds."""
    samples_per_insert: float = Field(default=256.0, gt=0)
    """Sampled transitions per inserted one (256: one gradient step per env step, SB3's)."""
    spi_tolerance: float = Field(default=8_192.0, ge=0)
    """Slack, in samples, before the limiter makes the trainer stop sampling or reading."""
    policy_frequency: int = Field(default=1, ge=1)
    """Gradient steps per policy (and temperature) step (CleanRL uses 2, SB3 1)."""
    alpha: float = Field(default=1.0, gt=0)
    """The entropy temperature (its initial value when ``autotune``)."""
    autotune: bool = True
    """Learn alpha toward ``target_entropy`` (default -|A|, the SAC paper's)."""
    target_entropy: float | None = None
    """The entropy ``autotune`` steers toward (null: -|A|, the action dimension)."""
    publish_every: int = Field(default=64, ge=1)
    """Gradient steps between policy versions."""


_STEPS_PER_LEARN = 32  # gradient steps per learn() call: bounds the loop's reaction time


class SAC(ReplayFed):
    """The learner: replay buffer + actor + twin Q-networks with targets + temperature."""

    def __init__(
        self,
        actor: SquashedGaussianActor,
        q_networks: tuple[SoftQNetwork, SoftQNetwork],
        target_networks: tuple[SoftQNetwork, SoftQNetwork],
        config: SACConfig,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        generator: torch.Generator,
        device: torch.device = CPU,
        collective: Collective = SOLO,
    ) -> None:
        self.device, self.collective = device, collective  # K ranks: gradients averaged
        actor = actor.to(device)
        q_networks = (q_networks[0].to(device), q_networks[1].to(device))
        target_networks = (target_networks[0].to(device), target_networks[1].to(device))
        self.actor, self.config, self.generator = actor, config, generator
        self.q1, self.q2 = q_networks
        self.q1_target, self.q2_target = target_networks
        self.q1_target.load_state_dict(self.q1.state_dict())
        self.q2_target.load_state_dict(self.q2.state_dict())
        q_params = list(self.q1.parameters()) + list(self.q2.parameters())
        self.q_optimizer = optim.Adam(q_params, lr=config.q_lr)
        self.actor_optimizer = optim.Adam(actor.parameters(), lr=config.policy_lr)
        action_dim = int(np.prod(action_shape))
        self.target_entropy = (
            -float(action_dim) if config.target_entropy is None else config.target_entropy
        )
        self.log_alpha = torch.tensor(
            float(np.log(config.alpha)), requires_grad=True, device=device
        )
        self.alpha_optimizer = optim.Adam([self.log_alpha], lr=config.q_lr)
        self.buffer = ReplayBuffer(config.buffer_size, obs_shape, action_shape, np.float32)
        self.limiter = SamplesPerInsertLimiter(
            config.samples_per_insert, config.learning_starts, config.spi_tolerance
        )
        self.sample_size = config.batch_size
        self._updates = 0
        self._since_publish = 0

    @property
    def updates(self) -> int:
        return self._updates

    @property
    def alpha(self) -> float:
        return float(self.log_alpha.exp().item())

    # ----------------------------------------------------------------- experience

    # ----------------------------------------------------------------- learning

    def learn(self, env_steps: int) -> tuple[dict[str, float], bool]:
        c = self.config
        q_losses: list[float] = []
        actor_losses: list[float] = []
        q_means: list[float] = []
        steps = 0
        while steps < _STEPS_PER_LEARN and self.ready():
            q_loss, q_mean, actor_loss = self._gradient_step()
            self.limiter.sample(c.batch_size)
            self._updates += 1
            self._since_publish += 1
            steps += 1
            q_losses.append(q_loss)
            q_means.append(q_mean)
            if actor_loss is not None:
                actor_losses.append(actor_loss)
        publish = self._since_publish >= c.publish_every
        if publish:
            self._since_publish = 0
        metrics = {  # means over this call's gradient steps
            "q_loss": float(np.mean(q_losses)) if q_losses else float("nan"),
            "actor_loss": float(np.mean(actor_losses)) if actor_losses else float("nan"),
            "q_values": float(np.mean(q_means)) if q_means else float("nan"),
            "alpha": self.alpha,
            "replay_size": float(self.buffer.size),
            "samples_per_insert_budget": self.limiter.budget,
            "samples_per_insert": self.limiter.ratio,
            "gradient_steps": float(steps),
        }
        return metrics, publish

    def _gradient_step(self) -> tuple[float, float, float | None]:
        c = self.config
        data = self.buffer.sample(c.batch_size, self.generator).to(self.device)
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            next_actions, next_log_pi = self.actor.sample(data.next_observations, self.generator)
            next_q = torch.min(
                self.q1_target(data.next_observations, next_actions),
                self.q2_target(data.next_observations, next_actions),
            )
            target = data.rewards + c.gamma * (1.0 - data.terminated) * (
                next_q - alpha * next_log_pi
            )
        q1, q2 = self.q1(data.observations, data.actions), self.q2(data.observations, data.actions)
        q_loss = F.mse_loss(q1, target) + F.mse_loss(q2, target)
        self.q_optimizer.zero_grad()
        q_loss.backward()  # type: ignore[no-untyped-call]
        average_optimizer_gradients(self.collective, self.q_optimizer, c.batch_size)
        self.q_optimizer.step()

        actor_loss: float | None = None
        if self._updates % c.policy_frequency == 0:
            actions, log_pi = self.actor.sample(data.observations, self.generator)
            q_pi = torch.min(
                self.q1(data.observations, actions), self.q2(data.observations, actions)
            )
            loss = (alpha * log_pi - q_pi).mean()
            self.actor_optimizer.zero_grad()
            loss.backward()
            average_optimizer_gradients(self.collective, self.actor_optimizer, c.batch_size)
            self.actor_optimizer.step()
            actor_loss = loss.item()
            if c.autotune:
                alpha_loss = (
                    -self.log_alpha.exp() * (log_pi.detach() + self.target_entropy)
                ).mean()
                self.alpha_optimizer.zero_grad()
                alpha_loss.backward()  # type: ignore[no-untyped-call]
                average_optimizer_gradients(self.collective, self.alpha_optimizer, c.batch_size)
                self.alpha_optimizer.step()

        with torch.no_grad():  # Polyak-average the targets after every gradient step
            for online, target_net in ((self.q1, self.q1_target), (self.q2, self.q2_target)):
                for p, tp in zip(online.parameters(), target_net.parameters(), strict=True):
                    tp.mul_(1.0 - c.tau).add_(p, alpha=c.tau)
        return q_loss.item() / 2, q1.mean().item(), actor_loss

    # ----------------------------------------------------------------- state

    def policy_state_dict(self) -> Mapping[str, torch.Tensor]:
        return cpu_state_dict(self.actor.state_dict())

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(),
            "q1": self.q1.state_dict(),
            "q2": self.q2.state_dict(),
            "q1_target": self.q1_target.state_dict(),
            "q2_target": self.q2_target.state_dict(),
            "log_alpha": self.log_alpha.detach().cpu().clone(),
            "q_optimizer": self.q_optimizer.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "limiter": self.limiter.state_dict(),
            "updates": self._updates,
            "since_publish": self._since_publish,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        for name in ("q1", "q2", "q1_target", "q2_target"):
            getattr(self, name).load_state_dict(state[name])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.q_optimizer.load_state_dict(state["q_optimizer"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        self.limiter.load_state_dict(state["limiter"])
        self._updates = int(state["updates"])
        self._since_publish = int(state["since_publish"])
