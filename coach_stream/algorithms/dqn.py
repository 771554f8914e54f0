"""DQN's builder: off-policy, shares of ``rollout.chunk_steps``, the log refills replay.

Workers act epsilon-greedily and look for a newer version after every ``chunk_steps``
steps per env; chunks carry no behaviour columns. A restarted trainer re-reads the log up
to its stored positions into the replay buffer (the log is the replay).
"""

from __future__ import annotations

import torch

from coach_stream.algorithms.common import learner_device, trainer_settings, worker_settings
from coach_stream.config import Preset
from coach_stream.core import Actor, Learner
from coach_stream.envs import EnvShape
from coach_stream.errors import ConfigError
from coach_stream.policies.actors import DQNActor
from coach_stream.policies.networks import QNetwork
from coach_stream.rollout.worker import WorkerSettings
from coach_stream.trainer.dqn import DQN
from coach_stream.trainer.loop import TrainerSettings


class DQNBuilder:
    def __init__(self, preset: Preset) -> None:
        self.preset, self.config = preset, preset.dqn_config

    @property
    def share_steps(self) -> int:
        """Steps per env between two looks for a newer version (one chunk's worth)."""
        return self.preset.rollout.chunk_steps

    def make_learner(self, shape: EnvShape, workers: int, generator: torch.Generator) -> Learner:
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
        )

    def make_actor(self, shape: EnvShape, greedy: bool, seed: int) -> Actor:
        torch.manual_seed(seed)  # the initial weights are replaced by the first version
        return DQNActor(QNetwork(shape, self.preset.network), self.config, greedy, seed)

    def make_worker_settings(self, run_id: str, worker_id: int) -> WorkerSettings:
        return worker_settings(self.preset, run_id, worker_id, self.share_steps, behaviour=False)

    def make_trainer_settings(self, run_id: str) -> TrainerSettings:
        return trainer_settings(self.preset, run_id, refill=True)
