"""IMPALA's builder: ASYNC on-policy with V-trace; workers never wait for a version.

Workers act with whatever version they hold (categorical or Gaussian, the PPO actors)
and write the behaviour log-probs; they take a newer version, when there is one, after
every ``chunk_steps`` steps per env. The learner corrects for their lag with V-trace.
Nothing is refilled on resume.
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
from coach_stream.trainer.impala import IMPALA, IMPALAConfig


class IMPALAPreset(Preset):
    """A preset of algorithm ``impala``: the common keys and the ``impala:`` section."""

    algorithm: Literal["impala"]
    impala: IMPALAConfig | None = None

    @property
    def impala_config(self) -> IMPALAConfig:
        return self.section_of(IMPALAConfig)


class IMPALABuilder(ActorCriticBuilder):
    mode = Mode.ASYNC
    mode_reason = "IMPALA learns from workers that never wait; V-trace corrects their lag"
    preset_type = IMPALAPreset
    learns_from_any_policy = True
    data_parallel = True

    def __init__(self, preset: Preset) -> None:
        super().__init__(preset)
        self.config = preset.section_of(IMPALAConfig)

    def make_learner(
        self, shape: EnvShape, workers: int, generator: Generator, collective: Collective = SOLO
    ) -> Learner:
        torch.manual_seed(generator.initial_seed())
        return IMPALA(
            actor_critic(self.preset, shape),
            self.config,
            generator,
            learner_device(self.preset),
            anneal_steps=self.config.anneal_steps or self.preset.env_step_budget,
            collective=collective,
        )
