"""Vector environments with SAME_STEP autoreset and per-worker, per-env seeds.

Seeds come from ``numpy.random.SeedSequence(run_seed)`` spawned along a (role, worker,
env) path, so every environment of every worker gets a distinct, reproducible stream (the
original Coach gave every worker the same seed, which made N workers explore like one).
SAME_STEP autoreset returns the final observation of an episode in ``info["final_obs"]`` on
the step that ends it, which is what a chunk needs for its bootstrap row.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from coach_stream.envs.wrappers import import_env_package, make_kwargs, wrapper_fns
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
    """What networks need to know about an environment: observations and actions.

    Discrete actions: ``num_actions`` choices, written as int64 scalars. Continuous (Box)
    actions: ``action_shape`` is their shape, ``num_actions`` their flat size, and
    ``action_low``/``action_high`` the bounds; written as float32 vectors.
    """

    obs_shape: tuple[int, ...]
    num_actions: int
    obs_dtype: str = "float32"
    """The observation space's dtype (gymnasium's Box default): what every chunk carries.
    Frames stay uint8 all the way to the network (``policies.cnn``)."""
    action_shape: tuple[int, ...] = ()
    """() for discrete actions; the Box's shape for continuous ones."""
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.obs_shape))

    @property
    def continuous(self) -> bool:
        return self.action_shape != ()

    @property
    def action_dtype(self) -> str:
        """What rollout workers write into a chunk's ``actions`` column."""
        return "float32" if self.continuous else "int64"


class ClipToBounds(gym.ActionWrapper[Any, Any, Any]):
    """Clips Box actions to the bounds and, unlike gymnasium's ``ClipAction``, keeps the
    bounded action space visible (networks scale to it, the trainer's door checks it)."""

    def action(self, action: Any) -> Any:
        space = self.action_space
        assert isinstance(space, gym.spaces.Box)
        return np.clip(action, space.low, space.high)


def _clip_box_actions(env: gym.Env[Any, Any]) -> gym.Wrapper[Any, Any, Any, Any]:
    if isinstance(env.action_space, gym.spaces.Box):
        return ClipToBounds(env)
    return gym.Wrapper(env)  # a no-op layer: make_vec wants a wrapper for every env


def make_vector_env(env_id: str, num_envs: int, wrappers: Sequence[str] = ()) -> VectorEnv:
    """A synchronous vector env (one process: the worker is the unit of parallelism).

    ``wrappers``: the preset's ``env_wrappers`` (``envs.wrappers``), applied in order.
    Continuous actions are clipped to the action space's bounds inside each env
    (gymnasium's ``ClipAction``, as CleanRL's continuous PPO does): a Gaussian policy's
    sample is written to the chunk unclipped, so its log-prob stays exact.
    """
    import_env_package(env_id)
    fns = wrapper_fns(wrappers)
    try:
        return gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode="sync",
            # copy: each step's observations are new arrays (the chunker keeps them)
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP, "copy": True},
            wrappers=[*fns, _clip_box_actions],
            **make_kwargs(wrappers),
        )
    except gym.error.Error as error:
        raise ConfigError(
            f"Cannot create environment {env_id!r} ({error}); check env_id and that its "
            "gymnasium extra (e.g. gymnasium[box2d]) is installed."
        ) from error


def make_env(env_id: str, wrappers: Sequence[str] = (), render: bool = False) -> gym.Env[Any, Any]:
    """One env as a worker's sub-env is made (the preset's wrappers, Box actions clipped),
    for watching a policy; ``render``: ``rgb_array`` frames from ``env.render()``."""
    import_env_package(env_id)
    kwargs = {**make_kwargs(wrappers), **({"render_mode": "rgb_array"} if render else {})}
    try:
        env = gym.make(env_id, **kwargs)
    except gym.error.Error as error:
        raise ConfigError(
            f"Cannot create environment {env_id!r} ({error}); check env_id and that its "
            "gymnasium extra (e.g. gymnasium[box2d]) is installed."
        ) from error
    for wrap in wrapper_fns(wrappers):
        env = wrap(env)
    return _clip_box_actions(env)


def env_shape(envs: VectorEnv) -> EnvShape:
    """The observation shape and the (discrete or Box) actions of one sub-environment."""
    obs_space, action_space = envs.single_observation_space, envs.single_action_space
    if not isinstance(obs_space, gym.spaces.Box):
        raise ConfigError(
            f"Observation space {obs_space} is not a Box; use a vector or image observation "
            "(for MiniGrid's Dict observation: env_wrappers [image])."
        )
    obs_shape, obs_dtype = tuple(obs_space.shape), np.dtype(obs_space.dtype).name
    if isinstance(action_space, gym.spaces.Discrete):
        return EnvShape(obs_shape, int(action_space.n), obs_dtype)
    if isinstance(action_space, gym.spaces.Box):
        low, high = action_space.low.reshape(-1), action_space.high.reshape(-1)
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise ConfigError(
                f"Action space {action_space} is unbounded; continuous policies squash or "
                "clip to finite bounds, wrap the env with finite ones."
            )
        return EnvShape(
            obs_shape,
            int(low.size),
            obs_dtype,
            action_shape=tuple(action_space.shape),
            action_low=tuple(float(x) for x in low),
            action_high=tuple(float(x) for x in high),
        )
    raise ConfigError(
        f"Action space {action_space} is neither Discrete nor Box; pick an environment with "
        "discrete or continuous (Box) actions."
    )


def probe_shape(env_id: str, wrappers: Sequence[str] = ()) -> EnvShape:
    """The shape of ``env_id`` (wrapped) without keeping an env (for the trainer's networks)."""
    envs = make_vector_env(env_id, 1, wrappers)
    try:
        return env_shape(envs)
    finally:
        envs.close()
