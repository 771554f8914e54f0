"""One builder per algorithm, chosen by ``Preset.algorithm`` (Acme's ``ActorLearnerBuilder``).

A builder turns a validated preset into the algorithm's parts: the trainer's ``Learner``,
a worker's or the evaluator's ``Actor``, and the settings that depend on the algorithm
(a worker's share of steps per version, whether chunks carry behaviour columns, whether
the trainer refills a replay buffer from the log on resume). The entry points and the
tests ask ``builder_for(preset)`` and never branch on the algorithm's name.

Adding an algorithm (docs/algorithms.md, "Adding an algorithm"): write its learner, its
settings section and its builder (one new module here, or a learner file in ``trainer/``
beside it); the builder declares its mode, its preset class (``Preset`` plus its section)
and what it refuses, and one line in ``BUILDERS`` registers it. ``config.py`` is untouched:
a preset validates as the union of the registered preset classes (``presets``).
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Protocol, Union

from pydantic import Field, TypeAdapter
from torch import Generator

from coach_stream.algorithms.common import Builder
from coach_stream.algorithms.dqn import DQNBuilder
from coach_stream.algorithms.impala import IMPALABuilder
from coach_stream.algorithms.ppo import PPOBuilder
from coach_stream.algorithms.sac import SACBuilder
from coach_stream.codec import ChunkSpec
from coach_stream.config import Preset
from coach_stream.core import Actor, Collective, Learner
from coach_stream.envs import EnvShape
from coach_stream.errors import ConfigError
from coach_stream.rollout.worker import WorkerSettings
from coach_stream.trainer.collective import SOLO
from coach_stream.trainer.settings import TrainerSettings


class AlgorithmBuilder(Protocol):
    """Everything that differs between algorithms, built from one preset."""

    def make_learner(
        self, shape: EnvShape, workers: int, generator: Generator, collective: Collective = SOLO
    ) -> Learner:
        """The trainer's learner with fresh networks (seeded from ``generator``'s seed)."""

    def make_actor(self, shape: EnvShape, greedy: bool, seed: int) -> Actor:
        """A worker's (or, ``greedy``, the evaluator's) actor; weights come with each version."""

    def make_worker_settings(self, run_id: str, worker_id: int) -> WorkerSettings:
        """A rollout worker's settings, its share of steps per version included."""

    def make_trainer_settings(self, run_id: str) -> TrainerSettings:
        """The trainer loop's settings for this algorithm."""


BUILDERS: dict[str, type[Builder]] = {
    "ppo": PPOBuilder,
    "dqn": DQNBuilder,
    "sac": SACBuilder,
    "impala": IMPALABuilder,
}
"""``Preset.algorithm`` -> builder: the one place algorithm names meet classes."""


def chunk_spec(preset: Preset, run_id: str, shape: EnvShape) -> ChunkSpec:
    """What every chunk of this run must look like at the trainer's door.

    Continuous actions must be finite float32 vectors of the env's action shape; SAC's
    squashed policy must also stay within the bounds (a Gaussian PPO/IMPALA sample is
    written unclipped and clipped by the env, so only its finiteness is checked).
    """
    bounded = BUILDERS[preset.algorithm].bounded_actions
    bounds = (shape.action_low, shape.action_high) if bounded else None
    return ChunkSpec(
        run_id,
        shape.obs_shape,
        shape.obs_dtype,
        shape.num_actions,
        shape.action_dtype,
        shape.action_shape,
        bounds if shape.continuous else None,
    )


@cache
def presets() -> TypeAdapter[Preset]:
    """Every registered algorithm's preset class, discriminated on ``algorithm``."""
    members: Any = tuple(builder.preset_type for builder in BUILDERS.values())
    union: Any = Annotated[Union[members], Field(discriminator="algorithm")]  # noqa: UP007
    return TypeAdapter(union)


def builder_for(preset: Preset) -> AlgorithmBuilder:
    """The builder of ``preset.algorithm``."""
    try:
        make = BUILDERS[preset.algorithm]
    except KeyError:
        known = ", ".join(sorted(BUILDERS))
        raise ConfigError(
            f"Preset {preset.name!r} names algorithm {preset.algorithm!r}, which has no "
            f"builder; use one of {known}."
        ) from None
    if preset.normalize.enabled:
        from coach_stream.algorithms.normalized import Normalized

        return Normalized(make(preset), preset)
    return make(preset)
