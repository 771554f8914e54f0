"""Random vector-env steps for the chunker's tests, so each of its write paths is fed the same
(imported by the tests beside it: this folder is on their path)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from coach_stream.core import Action

KINDS = {
    "flat float32, discrete": ((4,), np.float32, (), np.int64),
    "uint8 frames, discrete": ((3, 5, 5), np.uint8, (), np.int64),
    "float64, continuous": ((6,), np.float64, (2,), np.float32),
    "scalar float32, continuous": ((), np.float32, (1,), np.float32),
}
"""(observation shape, its dtype, action shape, its dtype) of each kind of env."""


def random_steps(
    kind: str, num_envs: int, behaviour: bool, seed: int, count: int = 60,
    next_dtype: Any = None,
) -> Iterator[Any]:  # fmt: skip
    """The first observations, then ``Chunker.add``'s arguments for each of ``count`` steps:
    episodes ending (8 %) and truncated (4 %) at random, rewards in float64 as gymnasium's
    vector envs give them, ``final_obs`` for the ended; ``next_dtype``: the next
    observations' dtype (the kind's by default)."""
    obs_shape, obs_dtype, action_shape, action_dtype = KINDS[kind]
    rng = np.random.default_rng(seed)

    def draw(shape: tuple[int, ...], dtype: Any) -> Any:
        return (rng.random((num_envs, *shape)) * 200).astype(dtype)

    yield draw(obs_shape, obs_dtype)
    for _ in range(count):
        terminated = rng.random(num_envs) < 0.08
        truncated = ~terminated & (rng.random(num_envs) < 0.04)
        log_probs = draw((), np.float32) if behaviour else None
        action = Action(draw(action_shape, action_dtype), log_probs)
        infos = {"final_obs": draw(obs_shape, obs_dtype), "_final_obs": terminated | truncated}
        next_obs = draw(obs_shape, next_dtype or obs_dtype)
        yield action, rng.normal(size=num_envs), terminated, truncated, next_obs, infos
