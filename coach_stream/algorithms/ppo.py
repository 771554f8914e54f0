"""PPO's builder: SYNC, one share of ``ppo.num_steps`` steps per env per policy version.

Discrete actions get a categorical policy (``ActorCritic``), continuous (Box) actions a
diagonal Gaussian (``GaussianActorCritic``); the learner is the same.

Each worker acts ``num_steps`` steps per env with version v and writes the behaviour
log-probs and values; the trainer's quota for v is every worker's share (``workers *
num_envs * num_steps``) unless ``ppo.steps_per_update`` sets it. Nothing is refilled on
resume: experience from before a restart was acted by an older version.
"""

from __future__ import annotations

import torch

from coach_stream.algorithms.common import (
    actor_critic,
    actor_critic_actor,
    learner_device,
    trainer_settings,
    worker_settings,
)
from coach_stream.config import Preset
from coach_stream.core import Actor, Learner
from coach_stream.envs import EnvShape
from coach_stream.rollout.worker import WorkerSettings
from coach_stream.trainer.loop import TrainerSettings
from coach_stream.trainer.ppo import PPO


class PPOBuilder:
    def __init__(self, preset: Preset) -> None:
        self.preset, self.config = preset, preset.ppo_config

    @property
    def share_steps(self) -> int:
        """Steps per env a worker acts with one version before it waits for the next."""
        return self.config.num_steps

    def steps_per_update(self, workers: int) -> int:
        """The trainer's SYNC quota of version v: explicit, or every worker's share."""
        if self.config.steps_per_update is not None:
            return self.config.steps_per_update
        return max(1, workers) * self.preset.rollout.num_envs * self.share_steps

    def make_learner(self, shape: EnvShape, workers: int, generator: torch.Generator) -> Learner:
        torch.manual_seed(generator.initial_seed())
        return PPO(
            actor_critic(self.preset, shape),
            self.config,
            steps_per_update=self.steps_per_update(workers),
            anneal_steps=self.config.anneal_steps or self.preset.env_step_budget,
            generator=generator,
            device=learner_device(self.preset),
        )

    def make_actor(self, shape: EnvShape, greedy: bool, seed: int) -> Actor:
        return actor_critic_actor(self.preset, shape, greedy, seed)

    def make_worker_settings(self, run_id: str, worker_id: int) -> WorkerSettings:
        return worker_settings(self.preset, run_id, worker_id, self.share_steps, behaviour=True)

    def make_trainer_settings(self, run_id: str) -> TrainerSettings:
        return trainer_settings(self.preset, run_id, refill=False)
