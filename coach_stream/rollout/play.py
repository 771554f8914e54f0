"""Watch a policy version: greedy episodes of the run's env, optionally recorded.

The actor is the one the run's evaluator uses (the preset's builder, greedy, the version's
normalisation statistics applied), the env is made as a worker's sub-env (the preset's
wrappers), so what plays is what was evaluated. Frames come from gymnasium's
``rgb_array`` render and are written as MP4 (imageio and its bundled ffmpeg) or GIF
(Pillow) under a hidden ``.partial`` name, renamed when complete: an interrupted or failed
recording leaves nothing at the output path.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from coach_stream.core import Actor
from coach_stream.envs import make_env
from coach_stream.errors import ConfigError

VIDEO_FORMATS = {".mp4": "mp4", ".gif": "gif"}


class FrameSink(Protocol):
    def __call__(self, frame: np.ndarray) -> None: ...


def video_format(path: Path) -> str:
    """``mp4`` or ``gif`` from the file name; anything else is a ConfigError."""
    kind = VIDEO_FORMATS.get(path.suffix.lower())
    if kind is None:
        raise ConfigError(f"--video {path} must end in .mp4 or .gif; pick one of those.")
    return kind


def play(
    actor: Actor,
    env_id: str,
    wrappers: tuple[str, ...],
    episodes: int,
    seed: int,
    frames: FrameSink | None = None,
    on_episode: Callable[[int, float, int], None] | None = None,
) -> list[float]:
    """``episodes`` greedy episodes (seeds ``seed``, ``seed + 1``, ...); their returns."""
    env = make_env(env_id, wrappers, render=frames is not None)
    if frames is not None:
        _check_renders(env, env_id)
    returns = []
    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            total, steps, done = 0.0, 0, False
            while not done:
                if frames is not None:
                    frames(np.asarray(env.render()))
                action = actor.act(np.asarray(obs)[None]).actions[0]
                obs, reward, terminated, truncated, _ = env.step(action)
                total, steps = total + float(reward), steps + 1
                done = bool(terminated or truncated)
            if frames is not None:
                frames(np.asarray(env.render()))  # the last state, too
            returns.append(total)
            if on_episode is not None:
                on_episode(episode, total, steps)
    finally:
        env.close()
    return returns


def _check_renders(env: gym.Env[Any, Any], env_id: str) -> None:
    """The env gives ``rgb_array`` frames here (MuJoCo needs an OpenGL it can load)."""
    try:
        if env.render_mode != "rgb_array":
            raise ConfigError(f"{env_id} has no rgb_array render mode")
        env.reset(seed=0)
        env.render()
    except Exception as error:
        env.close()
        raise ConfigError(
            f"{env_id} cannot render frames here ({str(error)[:160]}); play it without "
            "--video, or for MuJoCo set MUJOCO_GL to egl or osmesa."
        ) from None


def render_fps(env_id: str, wrappers: tuple[str, ...]) -> int:
    """The env's own frame rate (``metadata['render_fps']``), 30 when it names none."""
    env = make_env(env_id, wrappers)
    try:
        return int(env.metadata.get("render_fps") or 30)
    finally:
        env.close()


@contextlib.contextmanager
def recording(path: Path, fps: int, scale: float = 1.0) -> Iterator[FrameSink]:
    """A frame sink writing ``path`` (MP4 or GIF by its suffix) under a ``.partial`` name,
    renamed into place only when the ``with`` body ends without an exception."""
    kind = video_format(path)
    partial = path.with_name(f".{path.stem}.partial{path.suffix}")  # the suffix names its format
    frames: list[Any] = []
    writer: Any = None
    if kind == "mp4":
        import imageio.v2 as imageio

        # macro_block_size=1: any frame size (ffmpeg would otherwise resize to 16-multiples)
        writer = imageio.get_writer(partial, format="FFMPEG", mode="I", fps=fps, macro_block_size=1)

    def sink(frame: np.ndarray) -> None:
        if scale != 1.0:
            frame = _scaled(frame, scale)
        if writer is not None:
            writer.append_data(frame)
        else:
            frames.append(frame)

    try:
        yield sink
        if writer is not None:
            writer.close()
            writer = None
        else:
            _write_gif(partial, frames, fps)
        os.replace(partial, path)
    finally:
        if writer is not None:
            writer.close()
        partial.unlink(missing_ok=True)


def _scaled(frame: np.ndarray, scale: float) -> np.ndarray:
    from PIL import Image

    height, width = frame.shape[:2]
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return np.asarray(Image.fromarray(frame).resize(size, Image.Resampling.BILINEAR))


def _write_gif(path: Path, frames: list[np.ndarray], fps: int) -> None:
    from PIL import Image

    if not frames:
        raise ConfigError("no frames were rendered, so there is no GIF to write.")
    images = [Image.fromarray(frame) for frame in frames]
    images[0].save(
        path,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=round(1000 / fps),
        loop=0,
        optimize=True,
    )
