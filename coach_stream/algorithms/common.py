"""The settings every builder fills the same way from a preset; builders add their part."""

from __future__ import annotations

import torch

from coach_stream.config import Preset
from coach_stream.core import Actor
from coach_stream.envs import EnvShape
from coach_stream.policies.actors import GaussianPPOActor, PPOActor
from coach_stream.policies.networks import ActorCritic, GaussianActorCritic
from coach_stream.rollout.worker import WorkerSettings
from coach_stream.trainer.device import resolve_device
from coach_stream.trainer.loop import TrainerSettings


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
