from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from gymnasium.vector import VectorWrapper

from coach_stream.core import Action
from coach_stream.envs import SeedRole, env_seeds, make_vector_env
from coach_stream.errors import ConfigError
from coach_stream.rollout.chunker import Chunker


def _run(steps: int, chunk_steps: int, num_envs: int = 3) -> tuple[list[Any], list[Any], int]:
    envs = make_vector_env("CartPole-v1", num_envs)
    obs, _ = envs.reset(seed=env_seeds(7, 0, num_envs, SeedRole.ROLLOUT))  # type: ignore[arg-type]
    chunker = Chunker("r", 0, num_envs, chunk_steps, (4,), np.dtype(np.float32), behaviour=True)
    chunker.start(obs, version=3)
    rng = np.random.default_rng(0)
    chunks: list[Any] = []
    trace: list[Any] = []
    for _ in range(steps):
        actions = rng.integers(0, 2, num_envs)
        action = Action(actions, np.full(num_envs, -0.5, np.float32))
        before = chunker.last_obs.copy()
        obs, rewards, term, trunc, infos = envs.step(actions)
        trace.append((before, actions, term.copy(), infos.get("final_obs")))
        chunks += chunker.add(action, rewards, term, trunc, obs, infos)
    chunks += chunker.flush()
    return chunks, trace, num_envs


def test_chunks_cover_every_step_once_and_respect_t() -> None:
    chunks, trace, num_envs = _run(steps=120, chunk_steps=16)
    assert sum(c.num_steps for c in chunks) == 120 * num_envs
    for env in range(num_envs):
        mine = [c for c in chunks if c.env_index == env]
        assert [c.chunk_seq for c in mine] == list(range(len(mine)))
        actions = np.concatenate([c.actions for c in mine])
        assert np.array_equal(actions, np.array([t[1][env] for t in trace]))
    for c in chunks:
        assert 1 <= c.num_steps <= 16
        assert c.observations.shape == (c.num_steps + 1, 4)
        assert c.policy_version == 3 and c.log_probs is not None
        assert not c.terminated[:-1].any() and not c.truncated[:-1].any()


def test_episode_end_gives_final_observation_and_return() -> None:
    chunks, _trace, _ = _run(steps=200, chunk_steps=64)
    ended = [c for c in chunks if c.episode_ended]
    assert ended, "random CartPole episodes end well within 200 steps"
    for c in ended:
        assert c.terminated[-1]
        assert c.episode_return == float(c.rewards.sum()) + c.first_step  # reward 1 per step
        assert c.episode_length == c.first_step + c.num_steps
        # the bootstrap row is the terminal observation, not the reset observation
        assert abs(c.observations[-1][2]) > 0.2 or abs(c.observations[-1][0]) > 2.3
    # chunks continuing an episode start where the previous one stopped
    first = [c for c in chunks if c.env_index == 0]
    for prev, nxt in itertools.pairwise(first):
        if not prev.episode_ended:
            assert nxt.first_step == prev.first_step + prev.num_steps
            assert np.array_equal(nxt.observations[0], prev.observations[-1])
        else:
            assert nxt.first_step == 0


def test_seeds_differ_per_worker_env_and_role() -> None:
    a = env_seeds(1, 0, 8, SeedRole.ROLLOUT)
    b = env_seeds(1, 1, 8, SeedRole.ROLLOUT)
    c = env_seeds(1, 0, 8, SeedRole.EVALUATOR)
    assert len(set(a + b + c)) == 24
    assert a == env_seeds(1, 0, 8, SeedRole.ROLLOUT)
    assert a != env_seeds(2, 0, 8, SeedRole.ROLLOUT)


def test_start_continues_each_envs_chunk_seq_where_the_log_left_it() -> None:
    # A restarted worker passes ExperienceWriter.next_chunk_seqs here; before, every
    # restart began again at 0 and repeated chunk_seqs already in the log.
    chunker = Chunker("r", 0, 3, 2, (4,), np.dtype(np.float32), behaviour=False)
    chunker.start(np.zeros((3, 4), np.float32), version=0, next_seqs=[5, 0, 9])
    flags = np.zeros(3, bool)
    chunks = []
    for _ in range(4):  # two full chunks per env
        chunks += chunker.add(
            Action(np.zeros(3, np.int64)),
            np.ones(3, np.float32),
            flags,
            flags,
            np.ones((3, 4), np.float32),
            {},
        )
    seqs = {env: [c.chunk_seq for c in chunks if c.env_index == env] for env in range(3)}
    assert seqs == {0: [5, 6], 1: [0, 1], 2: [9, 10]}
    with pytest.raises(ValueError, match="3 non-negative"):
        chunker.start(np.zeros((3, 4), np.float32), version=1, next_seqs=[1, 2])
    with pytest.raises(ValueError, match="3 non-negative"):
        chunker.start(np.zeros((3, 4), np.float32), version=1, next_seqs=[1, -2, 3])


def test_a_chunker_used_before_start_says_so() -> None:
    chunker = Chunker("r", 0, 1, 2, (4,), np.dtype(np.float32), behaviour=False)
    with pytest.raises(RuntimeError, match="start"):
        chunker.flush()


class _HideFinalObs(VectorWrapper):
    """A wrapper that drops SAME_STEP autoreset's final observations from the step info."""

    def step(self, actions: Any) -> Any:
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        infos = {k: v for k, v in infos.items() if k not in ("final_obs", "_final_obs")}
        return obs, rewards, terminated, truncated, infos


def test_a_vector_env_that_hides_final_observations_is_refused_at_the_first_episode_end() -> None:
    envs = _HideFinalObs(make_vector_env("CartPole-v1", 2))
    obs, _ = envs.reset(seed=[1, 2])
    chunker = Chunker("r", 0, 2, 500, (4,), np.dtype(np.float32), behaviour=False)
    chunker.start(obs, version=0)
    action = Action(np.zeros(2, np.int64))  # always left: episodes end within ~10 steps
    with pytest.raises(ConfigError, match='no "final_obs"'):
        for _ in range(100):
            obs, rewards, term, trunc, infos = envs.step(action.actions)
            chunker.add(action, rewards, term, trunc, obs, infos)
    assert chunker.episodes == 0  # no chunk with a reset observation as its bootstrap row


def test_kept_steps_without_final_observations_are_refused_when_written() -> None:
    """``add_encoded`` keeps a share's steps and writes them later: the missing final
    observation is found then, before any chunk with a reset observation as its last row."""
    envs = _HideFinalObs(make_vector_env("CartPole-v1", 2))
    obs, _ = envs.reset(seed=[1, 2])
    chunker = Chunker("r", 0, 2, 500, (4,), np.dtype(np.float32), behaviour=False)
    assert chunker._keep_limit  # small rows: the steps are kept
    chunker.start(obs, version=0)
    action = Action(np.zeros(2, np.int64))
    with pytest.raises(ConfigError, match='no "final_obs"'):
        for _ in range(100):
            obs, rewards, term, trunc, infos = envs.step(action.actions)
            assert chunker.add_encoded(action, rewards, term, trunc, obs, infos) == []
        chunker.drain_encoded()
    assert chunker.episodes == 0
