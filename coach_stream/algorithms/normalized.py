"""Any algorithm's builder, with normalisation: ``builder_for`` wraps a builder in this when
the preset has a ``normalize`` section that turns something on.

The learner learns through the trainer's statistics (``trainer.normalize``) and every actor
acts through the statistics of the version it holds (``policies.normalization``); the rest
of the builder is the algorithm's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import Generator

from coach_stream.config import Preset
from coach_stream.core import Actor, Collective, Learner
from coach_stream.envs import EnvShape
from coach_stream.policies.normalization import NormalizingActor
from coach_stream.rollout.worker import WorkerSettings
from coach_stream.trainer.collective import SOLO
from coach_stream.trainer.normalize import NormalizingLearner
from coach_stream.trainer.settings import TrainerSettings

if TYPE_CHECKING:
    from coach_stream.algorithms import AlgorithmBuilder


class Normalized:
    """``inner``'s learner and actors, seeing experience through the run's statistics."""

    def __init__(self, inner: AlgorithmBuilder, preset: Preset) -> None:
        self.inner, self.preset = inner, preset

    def __getattr__(self, name: str) -> object:  # the algorithm's own extras (steps_per_update)
        return getattr(self.inner, name)

    def make_learner(
        self, shape: EnvShape, workers: int, generator: Generator, collective: Collective = SOLO
    ) -> Learner:
        self.preset.check_normalizable(tuple(shape.obs_shape), str(shape.obs_dtype))
        learner = self.inner.make_learner(shape, workers, generator, collective)
        config = self.preset.normalize
        gamma = config.gamma if config.gamma is not None else self.preset.discount
        obs_shape = tuple(shape.obs_shape)
        return NormalizingLearner(learner, config, gamma, obs_shape, collective)

    def make_actor(self, shape: EnvShape, greedy: bool, seed: int) -> Actor:
        self.preset.check_normalizable(tuple(shape.obs_shape), str(shape.obs_dtype))
        return NormalizingActor(self.inner.make_actor(shape, greedy, seed))

    def make_worker_settings(self, run_id: str, worker_id: int) -> WorkerSettings:
        return self.inner.make_worker_settings(run_id, worker_id)

    def make_trainer_settings(self, run_id: str) -> TrainerSettings:
        return self.inner.make_trainer_settings(run_id)
