from __future__ import annotations

import numpy as np
import pytest
import torch

from coach_stream.core import ExperienceChunk
from coach_stream.trainer.ppo import gae
from coach_stream.trainer.replay import ReplayBuffer, SamplesPerInsertLimiter


def test_gae_matches_the_recursion_and_respects_terminals() -> None:
    rewards = np.array([1.0, 1.0, 1.0, 1.0], np.float32)
    values = np.array([0.5, 0.4, 0.3, 0.2], np.float32)
    chunk_end = np.array([False, True, False, True])
    bootstrap = np.array([0.0, 9.0, 0.0, 7.0], np.float32)
    terminated = np.array([False, True, False, False])
    adv = gae(rewards, values, bootstrap, terminated, chunk_end, gamma=0.9, lam=0.5)
    # chunk 1 ends terminated: no bootstrap from 9.0
    d1 = 1.0 - 0.4
    d0 = 1.0 + 0.9 * 0.4 - 0.5
    assert adv[1] == pytest.approx(d1) and adv[0] == pytest.approx(d0 + 0.45 * d1)
    # chunk 2 ends truncated (cut): bootstraps from 7.0
    d3 = 1.0 + 0.9 * 7.0 - 0.2
    d2 = 1.0 + 0.9 * 0.2 - 0.3
    assert adv[3] == pytest.approx(d3) and adv[2] == pytest.approx(d2 + 0.45 * d3)


def test_limiter_keeps_samples_per_insert() -> None:
    limiter = SamplesPerInsertLimiter(samples_per_insert=4.0, min_inserts=10, tolerance=16)
    limiter.insert(9)
    assert not limiter.can_sample(1) and limiter.wants_inserts()
    limiter.insert(11)  # 10 past the minimum: 40 samples earned
    assert limiter.can_sample(32) and not limiter.wants_inserts()
    limiter.sample(32)
    assert not limiter.can_sample(16) and limiter.wants_inserts()
    assert limiter.budget == 8


def _chunk(n: int, terminated: bool, start: float = 0.0) -> ExperienceChunk:
    """Observation row i is ``[start + 2i, start + 2i + 1]``, so each step is recognisable."""
    obs = np.arange((n + 1) * 2, dtype=np.float32).reshape(n + 1, 2) + start
    term = np.zeros(n, np.bool_)
    term[-1] = terminated
    return ExperienceChunk(
        "r",
        0,
        0,
        0,
        0,
        0,
        obs,
        np.ones(n, np.int64),
        np.ones(n, np.float32),
        term,
        np.zeros(n, np.bool_),
    )


def test_replay_buffer_overwrites_the_oldest_transitions_when_full() -> None:
    buffer = ReplayBuffer(capacity=5, obs_shape=(2,))
    assert buffer.add_chunk(_chunk(3, terminated=True, start=100)) == 3
    assert buffer.add_chunk(_chunk(4, terminated=False, start=200)) == 4
    assert buffer.size == 5
    sample = buffer.sample(512, torch.Generator().manual_seed(0))
    # 7 transitions into 5 slots: the second chunk's 4 and the first chunk's last one are
    # left; the first chunk's first two (100, 102) were overwritten.
    assert set(sample.observations[:, 0].tolist()) == {104.0, 200.0, 202.0, 204.0, 206.0}
    assert torch.equal(sample.next_observations, sample.observations + 2)
    # The one terminal transition kept is the first chunk's last step.
    assert torch.equal(sample.terminated.bool(), sample.observations[:, 0] == 104.0)
    assert set(sample.actions.tolist()) == {1}
