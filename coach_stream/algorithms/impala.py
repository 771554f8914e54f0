"""IMPALA's builder: ASYNC on-policy with V-trace; workers never wait for a version.

Workers act with whatever version they hold (categorical or Gaussian, the PPO actors)
and write the behaviour log-probs; they take a newer version, when there is one, after
every ``chunk_steps`` steps per env. The learner corrects for their lag with V-trace.
Nothing is refilled on resume.
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
from coach_stream.trainer.impala import IMPALA
from coach_stream.trainer.loop import TrainerSettings


class IMPALABuilder:
    def __init__(self, preset: Preset) -> None:
        self.preset, self.config = preset, preset.impala_config

    @property
    def share_steps(self) -> int:
        """Steps per env between two looks for a newer version (one chunk's worth)."""
        return self.preset.rollout.chunk_steps

    def make_learner(self, shape: EnvShape, workers: int, generator: torch.Generator) -> Learner:
        torch.manual_seed(generator.initial_seed())
        return IMPALA(
            actor_critic(self.preset, shape),
            self.config,
            generator,
            learner_device(self.preset),
            anneal_steps=self.config.anneal_steps or self.preset.env_step_budget,
        )

    def make_actor(self, shape: EnvShape, greedy: bool, seed: int) -> Actor:
        return actor_critic_actor(self.preset, shape, greedy, seed)

    def make_worker_settings(self, run_id: str, worker_id: int) -> WorkerSettings:
        return worker_settings(self.preset, run_id, worker_id, self.share_steps, behaviour=True)

    def make_trainer_settings(self, run_id: str) -> TrainerSettings:
        return trainer_settings(self.preset, run_id, refill=False)
