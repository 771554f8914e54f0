"""Gymnasium environments as rollout workers and evaluators step them."""

from coach_stream.envs.vector import (
    EnvShape,
    SeedRole,
    env_seeds,
    env_shape,
    make_env,
    make_vector_env,
    probe_shape,
    process_seed,
)

__all__ = [
    "EnvShape",
    "SeedRole",
    "env_seeds",
    "env_shape",
    "make_env",
    "make_vector_env",
    "probe_shape",
    "process_seed",
]
