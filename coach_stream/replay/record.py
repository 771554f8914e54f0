"""Record a dataset into an experience topic without a trainer: a controller plays the env.

For tests, benchmarks and demos of the replay tools: the experience goes through the same
``Chunker`` and ``KafkaExperienceWriter`` as a rollout worker's, so the topic holds exactly
what a run would write. ``cartpole_controller`` is a scripted near-expert for CartPole
(push toward where the pole is falling), the usual source of an "expert" offline dataset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from coach_stream.core import Action, ExperienceChunk, ExperienceWriter
from coach_stream.envs import env_shape, make_vector_env
from coach_stream.rollout.chunker import Chunker

Controller = Callable[[npt.NDArray[np.generic], np.random.Generator], npt.NDArray[np.int64]]


def cartpole_controller(epsilon: float = 0.0) -> Controller:
    """Push the cart toward the side the pole leans and moves to; ``epsilon``: random actions."""

    def act(obs: npt.NDArray[np.generic], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        o = np.asarray(obs, dtype=np.float64)
        actions = (o[:, 2] + 0.5 * o[:, 3] + 0.01 * o[:, 1] > 0).astype(np.int64)
        if epsilon > 0:
            flip = rng.random(len(actions)) < epsilon
            actions[flip] = rng.integers(0, 2, int(flip.sum()))
        return actions

    return act


@dataclass(frozen=True)
class Recorded:
    chunks: list[ExperienceChunk]
    """Everything written, in write order (a test compares replays with it)."""
    returns: list[float]


def record(
    writer: ExperienceWriter,
    run_id: str,
    env_id: str,
    controller: Controller,
    steps: int,
    *,
    worker_id: int = 0,
    num_envs: int = 4,
    chunk_steps: int = 32,
    seed: int = 0,
    policy_version: int = 0,
) -> Recorded:
    """Play ``steps`` vector steps with ``controller`` and write every chunk (then flush)."""
    envs = make_vector_env(env_id, num_envs)
    try:
        shape = env_shape(envs)
        chunker = Chunker(
            run_id,
            worker_id,
            num_envs,
            chunk_steps,
            shape.obs_shape,
            np.dtype(shape.obs_dtype),
            behaviour=False,
        )
        rng = np.random.default_rng(seed)
        obs, _ = envs.reset(seed=[seed * 1000 + i for i in range(num_envs)])  # type: ignore[arg-type]
        chunker.start(obs, policy_version)
        written: list[ExperienceChunk] = []
        for _ in range(steps):
            actions = controller(chunker.last_obs, rng)
            obs, rewards, terminated, truncated, infos = envs.step(actions)
            chunks = chunker.add(
                Action(actions=actions),
                np.asarray(rewards, dtype=np.float32),
                np.asarray(terminated),
                np.asarray(truncated),
                obs,
                infos,
            )
            for chunk in chunks:
                writer.write(chunk)
            written += chunks
        for chunk in chunker.flush():
            writer.write(chunk)
            written.append(chunk)
        writer.flush(60)
    finally:
        envs.close()
    returns = [c.episode_return for c in written if c.episode_return is not None]
    return Recorded(written, returns)
