"""DQN's builder: off-policy, shares of ``rollout.chunk_steps``, the log refills replay.

Workers act epsilon-greedily and look for a newer version after every ``chunk_steps``
steps per env; chunks carry no behaviour columns. A restarted trainer re-reads the log up
to its stored positions into the replay buffer (the log is the replay).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Generator

from coach_stream.algorithms.common import ReplayBuilder, learner_device
from coach_stream.config import Preset
from coach_stream.core import Actor, Collective, Learner
from coach_stream.envs import EnvShape
from coach_stream.errors import ConfigError
from coach_stream.policies.actors import DQNActor
from coach_stream.policies.networks import QNetwork
from coach_stream.trainer.collective import SOLO
from coach_stream.trainer.dqn import DQN, DQNConfig


class DQNPreset(Preset):
    """A preset of algorithm ``dqn``: the common keys and the ``dqn:`` section."""

    algorithm: Literal["dqn"]
    dqn: DQNConfig | None = None

    @property
    def dqn_config(self) -> DQNConfig:
        return self.section_of(DQNConfig)


class DQNBuilder(ReplayBuilder):
    mode_reason = "DQN learns off-policy from workers that never wait"
    continuous_actions = False
    preset_type = DQNPreset

    def __init__(self, preset: Preset) -> None:
        super().__init__(preset)
        self.config = preset.section_of(DQNConfig)

    def make_learner(
        self, shape: EnvShape, workers: int, generator: Generator, collective: Collective = SOLO
    ) -> Learner:
        if shape.continuous:  # a task refuses (exit 2) rather than crash-loop
            raise ConfigError(
                f"Preset {self.preset.name!r}: DQN needs discrete actions and "
                f"{self.preset.env_id} has continuous (Box) ones; use ppo or sac."
            )
        torch.manual_seed(generator.initial_seed())
        network = self.preset.network
        return DQN(
            QNetwork(shape, network),
            QNetwork(shape, network),
            self.config,
            shape.obs_shape,
            generator,
            learner_device(self.preset),
            obs_dtype=shape.obs_dtype,
            collective=collective,
        )

    def make_actor(self, shape: EnvShape, greedy: bool, seed: int) -> Actor:
        torch.manual_seed(seed)  # the initial weights are replaced by the first version
        return DQNActor(QNetwork(shape, self.preset.network), self.config, greedy, seed)
