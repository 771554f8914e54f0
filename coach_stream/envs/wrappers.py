"""The preset's ``env_wrappers``: gymnasium's own wrappers, named, applied to every env.

- ``atari``: ``AtariPreprocessing`` (no-op starts up to 30, frame skip 4 with max-pooling
  of the last two frames, 84x84 greyscale, uint8 kept: ``scale_obs=False``) then
  ``FrameStackObservation`` of 4, as the Nature DQN paper and rl-zoo's Atari wrapper do;
  rewards are clipped to [-1, 1] (for Atari's integer rewards, their sign). The base env is
  made with ``frameskip=1`` so the frame skip happens once, in the wrapper. Episodes end
  at game over (no life-loss terminals), so a chunk's return is the game's (clipped) score.
- ``image``: MiniGrid's ``ImgObsWrapper``: the (7, 7, 3) uint8 agent view alone, without
  the mission string and direction of its Dict observation.
- ``delay:<d>`` (``delay:2ms``, ``delay:500us``, ``delay:0.01s``): every ``step`` sleeps
  ``d`` first, as a remote simulator or a physics engine would take: a latency-bound env
  whose throughput grows with the processes stepping it, not with the cores
  (``bench/scale.py``). Sleeping, not spinning, so it costs no CPU.
- ``limit:<n>`` (``limit:200``): gymnasium's ``TimeLimit``: an episode is truncated after
  ``n`` steps, if it has not ended sooner (the env's own limit still applies: whichever
  comes first). For short smoke runs and evaluations of envs whose episodes are long
  (Pong's games, HalfCheetah's 1,000 steps).

Environment packages that register their ids on import (ale-py, minigrid) are imported
here, by id prefix, so a preset needs only the id.
"""

from __future__ import annotations

import importlib
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, SupportsFloat

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


class StepDelay(gym.Wrapper[Any, Any, Any, Any]):
    """Sleeps ``seconds`` before every step: a fixed per-step latency (``delay:<d>``)."""

    def __init__(self, env: gym.Env[Any, Any], seconds: float) -> None:
        super().__init__(env)
        self.seconds = seconds

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        time.sleep(self.seconds)
        return self.env.step(action)


WRAPPERS: dict[str, Wrap] = {"atari": _atari, "image": _image}
"""Wrappers named by a bare word; ``delay:<d>`` takes a parameter (``parse_delay``)."""

MAX_DELAY_S = 10.0
_DELAY = re.compile(r"delay:(?P<value>\d+(?:\.\d*)?|\.\d+)(?P<unit>us|ms|s)")
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_delay(name: str) -> float | None:
    """Seconds of a ``delay:<d>`` entry (``delay:2ms`` -> 0.002); None for any other name.

    A malformed or out-of-range delay is a ConfigError naming the accepted form.
    """
    if not name.startswith("delay:"):
        return None
    match = _DELAY.fullmatch(name)
    seconds = float(match["value"]) * _UNIT_S[match["unit"]] if match else 0.0
    if not 0.0 < seconds <= MAX_DELAY_S:
        raise ConfigError(
            f"Env wrapper {name!r} is not a delay above 0 and at most {MAX_DELAY_S:g} s; write "
            "it as delay:<number><us|ms|s>, e.g. delay:2ms."
        )
    return seconds


_LIMIT = re.compile(r"limit:(?P<steps>\d+)")


def parse_limit(name: str) -> int | None:
    """Steps of a ``limit:<n>`` entry (``limit:200`` -> 200); None for any other name.

    A malformed limit, or one under 1 step, is a ConfigError naming the accepted form.
    """
    if not name.startswith("limit:"):
        return None
    match = _LIMIT.fullmatch(name)
    steps = int(match["steps"]) if match else 0
    if steps < 1:
        raise ConfigError(
            f"Env wrapper {name!r} is not a step limit of at least 1; write it as "
            "limit:<steps>, e.g. limit:200."
        )
    return steps


def check_wrappers(wrappers: Sequence[str]) -> None:
    """Raise a ConfigError for any entry that names no wrapper (the preset's door)."""
    unknown = [
        name
        for name in wrappers
        if name not in WRAPPERS and parse_delay(name) is None and parse_limit(name) is None
    ]
    if unknown:
        raise ConfigError(
            f"Unknown env wrapper(s) {', '.join(unknown)}; use "
            f"{', '.join(sorted(WRAPPERS))}, delay:<d> (e.g. delay:2ms) or limit:<steps> "
            "(e.g. limit:200)."
        )


def _delay(seconds: float) -> Wrap:
    return lambda env: StepDelay(env, seconds)


def _limit(steps: int) -> Wrap:
    return lambda env: gym.wrappers.TimeLimit(env, steps)


def make_kwargs(wrappers: Sequence[str]) -> dict[str, Any]:
    """Keyword arguments for the base env that the wrappers need.

    ``atari``: no frame skip in the base env (the wrapper skips), and grey observations:
    ``AtariPreprocessing`` reads each screen from the emulator itself and throws the base
    env's observation away, so that one had better be a third of RGB's bytes to copy
    (the frames the wrapper returns are the same).
    """
    return {"frameskip": 1, "obs_type": "grayscale"} if "atari" in wrappers else {}


def wrapper_fns(wrappers: Sequence[str]) -> list[Wrap]:
    """The wrapper functions of ``wrappers``, in order; an unknown name is a ConfigError."""
    check_wrappers(wrappers)
    fns: list[Wrap] = []
    for name in wrappers:
        if (seconds := parse_delay(name)) is not None:
            fns.append(_delay(seconds))
        elif (steps := parse_limit(name)) is not None:
            fns.append(_limit(steps))
        else:
            fns.append(WRAPPERS[name])
    return fns
