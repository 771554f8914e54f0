"""Preset -> learner and trainer settings: the one place algorithm names meet classes."""

from __future__ import annotations

import torch

from coach_stream.config import Preset
from coach_stream.envs import EnvShape
from coach_stream.policies.networks import ActorCritic, QNetwork
from coach_stream.trainer.dqn import DQN
from coach_stream.trainer.learner import Learner
from coach_stream.trainer.loop import TrainerSettings
from coach_stream.trainer.ppo import PPO


def build_learner(
    preset: Preset, shape: EnvShape, workers: int, generator: torch.Generator
) -> Learner:
    """PPO or DQN with freshly initialised networks (seeded from ``generator``'s seed)."""
    torch.manual_seed(generator.initial_seed())
    if preset.algorithm == "ppo":
        ppo = preset.ppo_config
        return PPO(
            ActorCritic(shape, preset.network),
            ppo,
            steps_per_update=preset.steps_per_update(workers),
            anneal_steps=ppo.anneal_steps or preset.env_step_budget,
            generator=generator,
        )
    return DQN(
        QNetwork(shape, preset.network),
        QNetwork(shape, preset.network),
        preset.dqn_config,
        shape.obs_shape,
        generator,
    )


def trainer_settings(preset: Preset, run_id: str) -> TrainerSettings:
    return TrainerSettings(
        run_id=run_id,
        target_return=preset.target_return,
        eval_episodes=preset.eval_episodes,
        env_step_budget=preset.env_step_budget,
        read_batch=preset.trainer.read_batch,
        checkpoint_every=preset.trainer.checkpoint_every,
        keep_policies=preset.trainer.keep_policies,
        log_every_s=preset.trainer.log_every_s,
        refill=preset.algorithm == "dqn",
    )
