"""PPO's builder: SYNC, one share of ``ppo.num_steps`` steps per env per policy version.

Discrete actions get a categorical policy (``ActorCritic``), continuous (Box) actions a
diagonal Gaussian (``GaussianActorCritic``); the learner is the same.

Each worker acts ``num_steps`` steps per env with version v and writes the behaviour
log-probs (no values: the trainer computes them with version v itself); the trainer's
quota for v is every worker's share (``workers * num_envs * num_steps``) unless
``ppo.steps_per_update`` sets it. Nothing is refilled on
resume: experience from before a restart was acted by an older version.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Generator

from coach_stream.algorithms.common import (
    ActorCriticBuilder,
    actor_critic,
    learner_device,
)
from coach_stream.config import Preset
from coach_stream.core import Collective, Learner, Mode
from coach_stream.envs import EnvShape
from coach_stream.trainer.collective import SOLO
from coach_stream.trainer.ppo import PPO, PPOConfig


class PPOPreset(Preset):
    """A preset of algorithm ``ppo``: the common keys and the ``ppo:`` section."""

    algorithm: Literal["ppo"]
    ppo: PPOConfig | None = None

    @property
    def ppo_config(self) -> PPOConfig:
        return self.section_of(PPOConfig)


class PPOBuilder(ActorCriticBuilder):
    data_parallel = True
    mode = Mode.SYNC
    mode_reason = "PPO is on-policy: each version's quota is gathered before an update"
    preset_type = PPOPreset

    def __init__(self, preset: Preset) -> None:
        super().__init__(preset)
        self.config = preset.section_of(PPOConfig)

    @property
    def share_steps(self) -> int:
        """Steps per env a worker acts with one version before it waits for the next."""
        return self.config.num_steps

    def steps_per_update(self, workers: int) -> int:
        """The trainer's SYNC quota of version v: explicit, or every worker's share."""
        if self.config.steps_per_update is not None:
            return self.config.steps_per_update
        return max(1, workers) * self.preset.rollout.num_envs * self.share_steps

    def make_learner(
        self, shape: EnvShape, workers: int, generator: Generator, collective: Collective = SOLO
    ) -> Learner:
        torch.manual_seed(generator.initial_seed())
        return PPO(
            actor_critic(self.preset, shape),
            self.config,
            steps_per_update=self.steps_per_update(workers),
            anneal_steps=self.config.anneal_steps or self.preset.env_step_budget,
            generator=generator,
            device=learner_device(self.preset),
            collective=collective,
        )
