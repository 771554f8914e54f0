"""The ``atari`` wrapper's base env: grey observations (cheaper to copy), the same frames."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from coach_stream.envs import make_vector_env
from coach_stream.envs.wrappers import WRAPPERS


def _frames(env: gym.Env[np.ndarray, int], steps: int) -> np.ndarray:
    obs, _ = env.reset(seed=3)
    frames = [obs]
    for action in np.random.default_rng(0).integers(0, 6, steps):
        obs, *_ = env.step(int(action))
        frames.append(obs)
    return np.stack(frames)


def test_the_base_env_observes_grey_and_the_wrapper_returns_the_same_frames_as_from_rgb() -> None:
    envs = make_vector_env("ALE/Pong-v5", 1, ["atari"])
    try:
        base = envs.envs[0].unwrapped  # type: ignore[attr-defined]
        assert base._obs_type == "grayscale" and base._frameskip == 1
        ours = _frames(envs.envs[0], 40)  # type: ignore[attr-defined]
    finally:
        envs.close()
    rgb = WRAPPERS["atari"](gym.make("ALE/Pong-v5", frameskip=1, obs_type="rgb"))
    try:
        assert np.array_equal(ours, _frames(rgb, 40))
    finally:
        rgb.close()
