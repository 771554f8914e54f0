"""The settings every builder fills the same way from a preset; builders add their part."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Generator

from coach_stream.config import Preset
from coach_stream.core import Actor, Collective, Learner, Mode
from coach_stream.envs import EnvShape
from coach_stream.policies.actors import GaussianPPOActor, PPOActor
from coach_stream.policies.networks import ActorCritic, GaussianActorCritic
from coach_stream.rollout.worker import WorkerSettings
from coach_stream.trainer.collective import SOLO
from coach_stream.trainer.device import resolve_device
from coach_stream.trainer.settings import TrainerSettings

REPLAY_MIXES_STATISTICS = (
    "its replay buffer would mix experience normalised with different statistics"
)
"""Why an off-policy builder refuses the ``normalize`` section."""


class Builder:
    """What every builder class declares (``coach_stream.algorithms.AlgorithmBuilder`` is what
    its instances do); a preset reads these before any builder is made."""

    mode: ClassVar[Mode]
    """SYNC (workers wait for each version: on-policy quotas) or ASYNC (nobody waits)."""
    mode_reason: ClassVar[str]
    """Why, for the error a preset with the other mode gets."""
    normalize_refusal: ClassVar[str | None] = None
    """Why the ``normalize`` section cannot apply (None: it can)."""
    bounded_actions: ClassVar[bool] = False
    """The trainer's door checks that continuous actions lie within the env's bounds."""
    continuous_actions: ClassVar[bool | None] = None
    """The action space it needs: True continuous (Box), False discrete, None either."""
    preset_type: ClassVar[type[Preset]]
    """``Preset`` with the algorithm's section: its member of the presets' union."""
    behaviour: ClassVar[bool] = True
    """Chunks carry the behaviour log-probs (the on-policy learners; PPO's ratio, V-trace's
    importance weights)."""
    refill: ClassVar[bool] = False
    """A resuming trainer re-reads the log into replay (the off-policy learners)."""
    data_parallel: ClassVar[bool] = False
    """Its learner all-reduces across K trainer ranks (``trainer.count``); a new algorithm
    opts in once its learner averages its gradients through the ``Collective``."""
    learns_from_any_policy: ClassVar[bool] = False
    """It can learn from experience another run's policy acted (``coach-stream attach``):
    the replay learners, and IMPALA, whose V-trace weighs each step by its own policy's
    probability over the behaviour policy's (so it needs chunks with ``behaviour``
    columns). PPO's clipped objective assumes its own, barely older policy acted."""

    def __init__(self, preset: Preset) -> None:
        self.preset = preset

    @property
    def share_steps(self) -> int:
        """Steps per env between two looks for a newer version (one chunk's worth, unless
        the algorithm's own rule says otherwise)."""
        return self.preset.rollout.chunk_steps

    def make_learner(
        self, shape: EnvShape, workers: int, generator: Generator, collective: Collective = SOLO
    ) -> Learner:
        raise NotImplementedError

    def make_actor(self, shape: EnvShape, greedy: bool, seed: int) -> Actor:
        raise NotImplementedError

    def make_worker_settings(self, run_id: str, worker_id: int) -> WorkerSettings:
        return worker_settings(self.preset, run_id, worker_id, self.share_steps, self.behaviour)

    def make_trainer_settings(self, run_id: str) -> TrainerSettings:
        return trainer_settings(self.preset, run_id, refill=self.refill)


class ReplayBuilder(Builder):
    """The off-policy learners (DQN, SAC): ASYNC, a replay buffer refilled from the log on
    resume, chunks without behaviour columns, no normalisation."""

    mode = Mode.ASYNC
    normalize_refusal = REPLAY_MIXES_STATISTICS
    behaviour = False
    refill = True
    learns_from_any_policy = True
    data_parallel = True


class ActorCriticBuilder(Builder):
    """The on-policy builders' common part: actor-critic actors and behaviour columns."""

    def make_actor(self, shape: EnvShape, greedy: bool, seed: int) -> Actor:
        return actor_critic_actor(self.preset, shape, greedy, seed)


def learner_device(preset: Preset) -> torch.device:
    """The device the trainer's learner uses (``trainer.device``; ``--device`` sets it)."""
    return resolve_device(preset.trainer.device)


def actor_critic(preset: Preset, shape: EnvShape) -> ActorCritic | GaussianActorCritic:
    """Categorical policy for discrete actions, diagonal Gaussian for continuous ones."""
    if shape.continuous:
        return GaussianActorCritic(shape, preset.network)
    return ActorCritic(shape, preset.network)


def actor_critic_actor(preset: Preset, shape: EnvShape, greedy: bool, seed: int) -> Actor:
    """A worker's (or the evaluator's) actor sampling ``actor_critic``'s policy."""
    torch.manual_seed(seed)  # the initial weights are replaced by the first version
    net = actor_critic(preset, shape)
    if isinstance(net, GaussianActorCritic):
        return GaussianPPOActor(net, greedy, seed)
    return PPOActor(net, greedy, seed)


def worker_settings(
    preset: Preset, run_id: str, worker_id: int, share_steps: int, behaviour: bool
) -> WorkerSettings:
    """A rollout worker's settings with the algorithm's share and behaviour-column choice."""
    rollout = preset.rollout
    return WorkerSettings(
        run_id=run_id,
        worker_id=worker_id,
        mode=preset.mode,
        chunk_steps=rollout.chunk_steps,
        share_steps=share_steps,
        behaviour=behaviour,
        sync_wait_s=rollout.sync_wait_s,
        policy_wait_s=rollout.policy_wait_s,
        log_every_s=preset.trainer.log_every_s,
        max_lead_steps=rollout.async_max_lead_steps,
        max_unread_steps=rollout.async_max_unread_steps,
    )


def trainer_settings(preset: Preset, run_id: str, refill: bool) -> TrainerSettings:
    """The trainer loop's settings; ``refill``: re-read the log into replay on resume."""
    trainer = preset.trainer
    return TrainerSettings(
        run_id=run_id,
        target_return=preset.target_return,
        eval_episodes=preset.eval_episodes,
        env_step_budget=preset.env_step_budget,
        read_batch=trainer.read_batch,
        checkpoint_every=trainer.checkpoint_every,
        keep_policies=trainer.keep_policies,
        keep_trainer_states=trainer.keep_trainer_states,
        log_every_s=trainer.log_every_s,
        refill=refill,
        refill_idle_s=trainer.refill_idle_s,
    )
