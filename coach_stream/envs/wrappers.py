"""The preset's ``env_wrappers``: gymnasium's own wrappers, named, applied to every env.

- ``atari``: ``AtariPreprocessing`` (no-op starts up to 30, frame skip 4 with max-pooling
  of the last two frames, 84x84 greyscale, uint8 kept: ``scale_obs=False``) then
  ``FrameStackObservation`` of 4, as the Nature DQN paper and rl-zoo's Atari wrapper do;
  rewards are clipped to [-1, 1] (for Atari's integer rewards, their sign). The base env is
  made with ``frameskip=1`` so the frame skip happens once, in the wrapper. Episodes end
  at game over (no life-loss terminals), so a chunk's return is the game's (clipped) score.
- ``image``: MiniGrid's ``ImgObsWrapper``: the (7, 7, 3) uint8 agent view alone, without
  the mission string and direction of its Dict observation.

Environment packages that register their ids on import (ale-py, minigrid) are imported
here, by id prefix, so a preset needs only the id.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from coach_stream.errors import ConfigError

Wrap = Callable[[gym.Env[Any, Any]], gym.Wrapper[Any, Any, Any, Any]]

ATARI_STACK = 4
"""Frames stacked by the ``atari`` wrapper (the observation is (4, 84, 84) uint8)."""

_PACKAGES = {"ALE/": "ale_py", "MiniGrid-": "minigrid", "BabyAI-": "minigrid"}
"""Id prefix -> the package whose import registers those ids with gymnasium."""


def import_env_package(env_id: str) -> None:
    """Import the package that registers ``env_id`` (a no-op for gymnasium's own envs)."""
    for prefix, package in _PACKAGES.items():
        if env_id.startswith(prefix):
            try:
                module = importlib.import_module(package)
            except ImportError as error:
                raise ConfigError(
                    f"Environment {env_id!r} needs the {package.replace('_', '-')} package "
                    f"({error}); install it with pip install {package.replace('_', '-')}."
                ) from error
            if package == "ale_py":
                gym.register_envs(module)  # ale-py registers ALE/* ids only when asked


def _atari(env: gym.Env[Any, Any]) -> gym.Wrapper[Any, Any, Any, Any]:
    from gymnasium.wrappers import AtariPreprocessing, ClipReward, FrameStackObservation

    try:
        env = AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84)
    except gym.error.DependencyNotInstalled as error:
        raise ConfigError(
            f"The atari wrapper needs OpenCV ({error}); pip install opencv-python-headless."
        ) from error
    return FrameStackObservation(ClipReward(env, -1.0, 1.0), ATARI_STACK)


def _image(env: gym.Env[Any, Any]) -> gym.Wrapper[Any, Any, Any, Any]:
    from minigrid.wrappers import ImgObsWrapper

    if not isinstance(env.observation_space, gym.spaces.Dict) or (
        "image" not in env.observation_space.spaces
    ):
        raise ConfigError(
            f"The image wrapper takes the 'image' entry of a Dict observation, and "
            f"{env.spec.id if env.spec else env} observes {env.observation_space}; "
            "remove 'image' from env_wrappers."
        )
    wrapped: gym.Wrapper[Any, Any, Any, Any] = ImgObsWrapper(env)  # type: ignore[no-untyped-call]
    return wrapped


WRAPPERS: dict[str, Wrap] = {"atari": _atari, "image": _image}


def make_kwargs(wrappers: Sequence[str]) -> dict[str, Any]:
    """Keyword arguments for the base env that the wrappers need."""
    return {"frameskip": 1} if "atari" in wrappers else {}


def wrapper_fns(wrappers: Sequence[str]) -> list[Wrap]:
    """The wrapper functions of ``wrappers``, in order; an unknown name is a ConfigError."""
    unknown = [name for name in wrappers if name not in WRAPPERS]
    if unknown:
        raise ConfigError(
            f"Unknown env wrapper(s) {', '.join(unknown)}; use {', '.join(sorted(WRAPPERS))}."
        )
    return [WRAPPERS[name] for name in wrappers]
