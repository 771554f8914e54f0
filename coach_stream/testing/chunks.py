"""A valid ``ExperienceChunk`` with every field set, for tests of what consumes chunks."""

from __future__ import annotations

import numpy as np

from coach_stream.core import ExperienceChunk


def make_chunk(
    steps: int = 5,
    obs_shape: tuple[int, ...] = (4,),
    *,
    seed: int = 0,
    obs_dtype: str = "float32",
    ended: bool = True,
    behaviour: bool = True,
) -> ExperienceChunk:
    """``steps`` random steps of one episode; ``ended`` sets ``terminated`` on the last step.

    ``behaviour`` adds the PPO columns (log-probabilities and values). The same ``seed``
    gives the same chunk, so two calls can be compared.
    """
    rng = np.random.default_rng(seed)
    terminated = np.zeros(steps, dtype=bool)
    if ended and steps:
        terminated[-1] = True
    return ExperienceChunk(
        run_id="run-1",
        worker_id=3,
        env_index=2,
        chunk_seq=7,
        policy_version=11,
        first_step=40,
        observations=(rng.random((steps + 1, *obs_shape)) * 255).astype(obs_dtype),
        actions=rng.integers(0, 6, size=steps, dtype=np.int64),
        rewards=rng.standard_normal(steps).astype(np.float32),
        terminated=terminated,
        truncated=np.zeros(steps, dtype=bool),
        log_probs=rng.standard_normal(steps).astype(np.float32) if behaviour else None,
        values=rng.standard_normal(steps).astype(np.float32) if behaviour else None,
        episode_return=12.5 if ended else None,
        episode_length=45 if ended else None,
        created_at_ms=1_700_000_000_123,
    )
