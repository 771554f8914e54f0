"""SAC's builder: ASYNC, off-policy, continuous actions; the log refills replay on resume.

Workers act with the squashed-Gaussian actor of whatever version they hold (uniformly at
random until the trainer has consumed ``sac.learning_starts`` env steps) and look for a
newer version after every ``chunk_steps`` steps per env; chunks carry no behaviour
columns. The trainer's door checks that every action lies within the env's bounds.
"""

from __future__ import annotations

import torch

from coach_stream.algorithms.common import learner_device, trainer_settings, worker_settings
from coach_stream.config import Preset
from coach_stream.core import Actor, Learner
from coach_stream.envs import EnvShape
from coach_stream.errors import ConfigError
from coach_stream.policies.actors import SACActor
from coach_stream.policies.networks import SoftQNetwork, SquashedGaussianActor
from coach_stream.rollout.worker import WorkerSettings
from coach_stream.trainer.loop import TrainerSettings
from coach_stream.trainer.sac import SAC


class SACBuilder:
    def __init__(self, preset: Preset) -> None:
        self.preset, self.config = preset, preset.sac_config

    @property
    def share_steps(self) -> int:
        """Steps per env between two looks for a newer version (one chunk's worth)."""
        return self.preset.rollout.chunk_steps

    def _continuous(self, shape: EnvShape) -> None:
        if not shape.continuous:
            raise ConfigError(
                f"Preset {self.preset.name!r}: SAC needs continuous (Box) actions and "
                f"{self.preset.env_id} has {shape.num_actions} discrete ones; use dqn or ppo."
            )

    def make_learner(self, shape: EnvShape, workers: int, generator: torch.Generator) -> Learner:
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
        )

    def make_actor(self, shape: EnvShape, greedy: bool, seed: int) -> Actor:
        self._continuous(shape)
        torch.manual_seed(seed)  # the initial weights are replaced by the first version
        net = SquashedGaussianActor(shape, self.preset.network)
        return SACActor(net, greedy, seed, uniform_steps=self.config.learning_starts)

    def make_worker_settings(self, run_id: str, worker_id: int) -> WorkerSettings:
        return worker_settings(self.preset, run_id, worker_id, self.share_steps, behaviour=False)

    def make_trainer_settings(self, run_id: str) -> TrainerSettings:
        return trainer_settings(self.preset, run_id, refill=True)
