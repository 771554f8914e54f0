"""DQN with (optionally) double-Q targets, a target network and a samples-per-insert limiter.

ASYNC mode: workers act epsilon-greedily with whatever version they hold and never wait;
every chunk, whatever its version, goes into the replay buffer (off-policy learning).
Gradient steps are paced by the limiter (``replay.py``) rather than by env steps, so the
ratio of learning to experience is the preset's, however many workers there are. After
``publish_every`` gradient steps the loop announces a new version.

The loss is the Huber loss (``smooth_l1``, threshold 1) on the one-step TD error, with
double-Q targets (van Hasselt et al., 2016) when ``dqn.double_q`` is set::

    a* = argmax_a Q_online(s', a)   if double_q   (the online net picks the action)
         argmax_a Q_target(s', a)   otherwise     (plain DQN: max over the target net)
    y  = r + gamma * (1 - terminated) * Q_target(s', a*)   (the target net evaluates it)
    loss = smooth_l1(Q_online(s, a), y)
         + cql_alpha * mean(logsumexp_b Q_online(s, b) - Q_online(s, a))   (CQL, if > 0)

The second term is CQL(H) (Kumar et al., 2020, eq. 4, the discrete form the paper runs on
Atari): it pushes down the Q-values of every action in proportion to their soft maximum
and pushes up the action the data took, so actions the data never shows cannot be
over-valued by bootstrapping from them. It matters when the learner's own policy never
acts: a shadow of another run (``coach-stream attach``), a stream of another policy's
experience; ``replay train --algo cql`` (``replay/offline/cql.py``) is the same penalty on
a fixed dataset. ``cql_alpha`` 0 (the default) is plain (double) DQN.

For comparison (read in their sources): SB3's DQN uses the same Huber loss with the plain
max target; CleanRL's ``dqn.py`` uses the mean squared error and the plain max target.
The target net follows the online one every ``target_update_every`` gradient steps, by
Polyak averaging with ``tau`` (1.0: a copy).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn, optim

from coach_stream.config import FrozenModel
from coach_stream.core import Collective
from coach_stream.policies.networks import QNetwork
from coach_stream.trainer.collective import SOLO, average_optimizer_gradients
from coach_stream.trainer.device import CPU, cpu_state_dict
from coach_stream.trainer.replay import ReplayBuffer, ReplayFed, SamplesPerInsertLimiter


class DQNConfig(FrozenModel):
    """Deep Q-learning with double-Q targets, a replay buffer and a samples-per-insert limit."""

    learning_rate: float = Field(default=2.3e-3, gt=0)
    """Adam's learning rate."""
    buffer_size: int = Field(default=100_000, ge=1)
    """Transitions the replay buffer holds (the oldest are replaced)."""
    batch_size: int = Field(default=64, ge=1)
    """Transitions per gradient step."""
    gamma: float = Field(default=0.99, gt=0, le=1)
    """Discount factor of the targets."""
    learning_starts: int = Field(default=1_000, ge=0)
    """Env steps in the buffer before the first gradient step."""
    samples_per_insert: float = Field(default=32.0, gt=0)
    """Sampled transitions per inserted transition (Reverb's limiter; rl-zoo: 128*64/256)."""
    spi_tolerance: float = Field(default=2_048.0, ge=0)
    """Slack, in samples, before the limiter makes the trainer stop sampling or reading."""
    target_update_every: int = Field(default=128, ge=1)
    """Gradient steps between target-network syncs."""
    tau: float = Field(default=1.0, gt=0, le=1)
    """Polyak factor of each target-network sync (1.0: a copy)."""
    double_q: bool = True
    """Double-Q targets: the online network picks the next action, the target net values it."""
    publish_every: int = Field(default=128, ge=1)
    """Gradient steps between policy versions."""
    exploration_initial_eps: float = Field(default=1.0, ge=0, le=1)
    """Epsilon of the workers' epsilon-greedy policy at the start."""
    exploration_final_eps: float = Field(default=0.04, ge=0, le=1)
    """Epsilon once ``exploration_steps`` env steps have passed."""
    exploration_steps: int = Field(default=8_000, ge=1)
    """Env steps (as counted by the trainer) over which epsilon decays linearly."""
    max_grad_norm: float = Field(default=10.0, gt=0)
    """Gradients are clipped to this global norm."""
    cql_alpha: float = Field(default=0.0, ge=0)
    """Weight of CQL's conservative term (module docstring); 0: plain DQN. For learning
    from experience the learner's own policy did not act (a shadow: ``coach-stream attach``)."""


_STEPS_PER_LEARN = 32  # gradient steps per learn() call: bounds the loop's reaction time


class DQN(ReplayFed):
    """The learner: replay buffer + online/target Q-networks + limiter."""

    def __init__(
        self,
        q_network: QNetwork,
        target_network: QNetwork,
        config: DQNConfig,
        obs_shape: tuple[int, ...],
        generator: torch.Generator,
        device: torch.device = CPU,
        obs_dtype: str = "float32",
        collective: Collective = SOLO,
    ) -> None:
        """``obs_dtype``: the env's; frames are stored as uint8 and scaled by the network.
        ``collective``: K trainer ranks, each sampling its own buffer; the gradients of
        their minibatches are averaged (a K x ``batch_size`` step)."""
        self.device, self.collective = device, collective
        q_network, target_network = q_network.to(device), target_network.to(device)
        self.q_network, self.target_network, self.config = q_network, target_network, config
        self.target_network.load_state_dict(q_network.state_dict())
        self.optimizer = optim.Adam(q_network.parameters(), lr=config.learning_rate, fused=True)
        self._params = list(q_network.parameters())  # walked by every gradient-norm clip
        self.buffer = ReplayBuffer(config.buffer_size, obs_shape, obs_dtype=obs_dtype)
        self.limiter = SamplesPerInsertLimiter(
            config.samples_per_insert, config.learning_starts, config.spi_tolerance
        )
        self.sample_size = config.batch_size
        self.generator = generator
        self._updates = 0
        self._since_publish = 0

    @property
    def updates(self) -> int:
        return self._updates

    def learn(self, env_steps: int) -> tuple[dict[str, float], bool]:
        c = self.config
        # The per-step figures stay tensors until the end: one sync per call, not two per
        # gradient step (on a GPU each .item() waits for the device to finish).
        losses: list[torch.Tensor] = []
        q_means: list[torch.Tensor] = []
        steps = 0
        while steps < _STEPS_PER_LEARN and self.ready():
            data = self.buffer.sample(c.batch_size, self.generator).to(self.device)
            with torch.no_grad():
                next_q_target = self.target_network(data.next_observations)
                if c.double_q:
                    next_actions = self.q_network(data.next_observations).argmax(dim=1)
                    next_q = next_q_target.gather(1, next_actions[:, None]).squeeze(1)
                else:
                    next_q = next_q_target.max(dim=1).values
                td_target = data.rewards + c.gamma * next_q * (1.0 - data.terminated)
            q_values = self.q_network(data.observations)
            old_val = q_values.gather(1, data.actions[:, None]).squeeze(1)
            loss = F.smooth_l1_loss(old_val, td_target)
            if c.cql_alpha > 0:
                conservative = torch.logsumexp(q_values, dim=1) - old_val
                loss = loss + c.cql_alpha * conservative.mean()

            self.optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            average_optimizer_gradients(self.collective, self.optimizer, c.batch_size)
            nn.utils.clip_grad_norm_(self._params, c.max_grad_norm)
            self.optimizer.step()
            self.limiter.sample(c.batch_size)
            self._updates += 1
            self._since_publish += 1
            steps += 1
            losses.append(loss.detach())
            q_means.append(old_val.detach().mean())

            if self._updates % c.target_update_every == 0:
                self._update_target()
        publish = self._since_publish >= c.publish_every
        if publish:
            self._since_publish = 0
        metrics = {  # means over this call's gradient steps
            "loss": torch.stack(losses).mean().item() if losses else float("nan"),
            "q_values": torch.stack(q_means).mean().item() if q_means else float("nan"),
            "replay_size": float(self.buffer.size),
            "samples_per_insert_budget": self.limiter.budget,
            "samples_per_insert": self.limiter.ratio,
            "gradient_steps": float(steps),
        }
        return metrics, publish

    def _update_target(self) -> None:
        tau = self.config.tau
        with torch.no_grad():
            for target, online in zip(
                self.target_network.parameters(), self.q_network.parameters(), strict=True
            ):
                target.mul_(1.0 - tau).add_(online, alpha=tau)

    def policy_state_dict(self) -> Mapping[str, torch.Tensor]:
        return cpu_state_dict(self.q_network.state_dict())

    def state_dict(self) -> dict[str, Any]:
        return {
            "q_network": self.q_network.state_dict(),
            "target_network": self.target_network.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "limiter": self.limiter.state_dict(),
            "updates": self._updates,
            "since_publish": self._since_publish,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.q_network.load_state_dict(state["q_network"])
        self.target_network.load_state_dict(state["target_network"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.limiter.load_state_dict(state["limiter"])
        self._updates = int(state["updates"])
        self._since_publish = int(state["since_publish"])
