"""SAC's builder: ASYNC, off-policy, continuous actions; the log refills replay on resume.

Workers act with the squashed-Gaussian actor of whatever version they hold (uniformly at
random until the trainer has consumed ``sac.learning_starts`` env steps) and look for a
newer version after every ``chunk_steps`` steps per env; chunks carry no behaviour
columns. The trainer's door checks that every action lies within the env's bounds.
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
from coach_stream.policies.actors import SACActor
from coach_stream.policies.networks import SoftQNetwork, SquashedGaussianActor
from coach_stream.trainer.collective import SOLO
from coach_stream.trainer.sac import SAC, SACConfig


class SACPreset(Preset):
    """A preset of algorithm ``sac``: the common keys and the ``sac:`` section."""

    algorithm: Literal["sac"]
    sac: SACConfig | None = None

    @property
    def sac_config(self) -> SACConfig:
        return self.section_of(SACConfig)


class SACBuilder(ReplayBuilder):
    mode_reason = "SAC learns off-policy from workers that never wait"
    bounded_actions = True
    continuous_actions = True
    preset_type = SACPreset

    def __init__(self, preset: Preset) -> None:
        super().__init__(preset)
        self.config = preset.section_of(SACConfig)

    def _continuous(self, shape: EnvShape) -> None:
        if not shape.continuous:
            raise ConfigError(
                f"Preset {self.preset.name!r}: SAC needs continuous (Box) actions and "
                f"{self.preset.env_id} has {shape.num_actions} discrete ones; use dqn or ppo."
            )

    def make_learner(
        self, shape: EnvShape, workers: int, generator: Generator, collective: Collective = SOLO
    ) -> Learner:
        self._continuous(shape)
        torch.manual_seed(generator.initial_seed())
        net = self.preset.network
        return SAC(
            SquashedGaussianActor(shape, net),
            (SoftQNetwork(shape, net), SoftQNetwork(shape, net)),
            (SoftQNetwork(shape, net), SoftQNetwork(shape, net)),
            self.config,
            shape.obs_shape,
            shape.action_shape,
            generator,
            learner_device(self.preset),
            collective,
        )

    def make_actor(self, shape: EnvShape, greedy: bool, seed: int) -> Actor:
        self._continuous(shape)
        torch.manual_seed(seed)  # the initial weights are replaced by the first version
        net = SquashedGaussianActor(shape, self.preset.network)
        # compiled: 1.127x a HalfCheetah worker's env steps per CPU-second (docs/performance.md)
        return SACActor(net, greedy, seed, uniform_steps=self.config.learning_starts, compiled=True)
