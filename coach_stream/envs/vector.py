"""Vector environments with SAME_STEP autoreset and per-worker, per-env seeds.

Seeds come from ``numpy.random.SeedSequence(run_seed)`` spawned along a (role, worker,
env) path, so every environment of every worker gets a distinct, reproducible stream (the
original Coach gave every worker the same seed, which made N workers explore like one).
SAME_STEP autoreset returns the final observation of an episode in ``info["final_obs"]`` on
the step that ends it, which is what a chunk needs for its bootstrap row.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from coach_stream.errors import ConfigError


class SeedRole(enum.IntEnum):
    """Separate seed branches, so an evaluator never replays a worker's episodes."""

    ROLLOUT = 0
    EVALUATOR = 1
    TRAINER = 2


def env_seeds(run_seed: int, worker_id: int, num_envs: int, role: SeedRole) -> list[int]:
    """One 32-bit seed per environment, distinct across roles, workers and envs."""
    branch = np.random.SeedSequence(run_seed, spawn_key=(int(role), worker_id))
    return [int(child.generate_state(1)[0]) for child in branch.spawn(num_envs)]


def process_seed(run_seed: int, worker_id: int, role: SeedRole) -> int:
    """A seed for a process's own randomness (action sampling, epsilon, minibatches)."""
    sequence = np.random.SeedSequence(run_seed, spawn_key=(int(role), worker_id, 1 << 20))
    return int(sequence.generate_state(1)[0])


@dataclass(frozen=True)
class EnvShape:
    """What networks need to know about an environment: observation size and action count."""

    obs_shape: tuple[int, ...]
    num_actions: int
    obs_dtype: str = "float32"
    """The observation space's dtype (gymnasium's Box default): what every chunk carries."""

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.obs_shape))


def make_vector_env(env_id: str, num_envs: int) -> VectorEnv:
    """A synchronous vector env (one process: the worker is the unit of parallelism)."""
    try:
        return gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        )
    except gym.error.Error as error:
        raise ConfigError(
            f"Cannot create environment {env_id!r} ({error}); check env_id and that its "
            "gymnasium extra (e.g. gymnasium[box2d]) is installed."
        ) from error


def env_shape(envs: VectorEnv) -> EnvShape:
    """The observation shape and number of discrete actions of one sub-environment."""
    obs_space, action_space = envs.single_observation_space, envs.single_action_space
    if not isinstance(action_space, gym.spaces.Discrete):
        raise ConfigError(
            f"Action space {action_space} is not Discrete; the built-in PPO and DQN support "
            "discrete actions only, pick a discrete environment."
        )
    if not isinstance(obs_space, gym.spaces.Box):
        raise ConfigError(f"Observation space {obs_space} is not a Box; use a vector observation.")
    return EnvShape(
        obs_shape=tuple(obs_space.shape),
        num_actions=int(action_space.n),
        obs_dtype=np.dtype(obs_space.dtype).name,
    )


def probe_shape(env_id: str) -> EnvShape:
    """The shape of ``env_id`` without keeping an environment (for the trainer's networks)."""
    envs = make_vector_env(env_id, 1)
    try:
        return env_shape(envs)
    finally:
        envs.close()
