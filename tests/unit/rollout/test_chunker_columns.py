"""The chunker with hand-made steps: every column of every chunk, value and dtype.

Two envs and T = 3, driven step by step so each chunk's content is known exactly: an
episode that terminates with SAME_STEP autoreset info, one truncated without it, a full
chunk, a chunk in the middle of an episode and what ``flush`` leaves.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from coach_stream.core import Action, ExperienceChunk
from coach_stream.errors import ConfigError
from coach_stream.rollout.chunker import Chunker

FINAL = np.array([200, 201], np.uint8)  # env 0's terminal observation (before its reset)
FINAL1 = np.array([210, 211], np.uint8)  # env 1's last observation when it is truncated


def obs(k: int) -> np.ndarray:
    """Both envs' observations after step k (uint8, so a stray float or None shows)."""
    return np.array([[k, 100 + k], [50 + k, 150 + k]], np.uint8)


def action(k: int) -> Action:
    return Action(
        np.array([k, 10 + k], np.int64),
        np.array([-0.5 * k, -0.25 * k], np.float32),
    )


def rewards(k: int) -> np.ndarray:
    return np.array([k, 2 * k], np.float32)


def run(behaviour: bool = True) -> tuple[Chunker, list[ExperienceChunk], list[ExperienceChunk]]:
    """Five steps, then a flush; returns the chunks of the steps and of the flush apart."""
    chunker = Chunker("run-a", 4, 2, 3, (2,), np.dtype(np.uint8), behaviour=behaviour)
    chunker.start(obs(0), version=7)
    no = np.zeros(2, bool)
    env0, env1 = np.array([True, False]), np.array([False, True])
    autoreset: dict[str, Any] = {
        "final_obs": np.array([FINAL, None], dtype=object),
        "_final_obs": env0,
    }
    autoreset1: dict[str, Any] = {
        "final_obs": np.array([None, FINAL1], dtype=object),
        "_final_obs": env1,
    }
    steps = {  # k: (terminated, truncated, infos)
        1: (no, no, {}),
        2: (env0, no, autoreset),  # env 0 terminates; its final observation is in infos
        3: (no, no, {}),  # env 1 has 3 steps: a full chunk
        4: (no, env1, autoreset1),  # env 1 is truncated (time limit): bootstraps from FINAL1
        5: (no, no, {}),  # env 0 has 3 steps again
    }
    chunks: list[ExperienceChunk] = []
    for k, (terminated, truncated, infos) in steps.items():
        chunks += chunker.add(action(k), rewards(k), terminated, truncated, obs(k), infos)
    return chunker, chunks, chunker.flush()


def rows(env: int, ks: list[int]) -> np.ndarray:
    return np.stack([obs(k)[env] for k in ks])


def test_each_chunk_holds_exactly_its_steps() -> None:
    before_ms = int(time.time() * 1000)
    chunker, chunks, flushed = run()
    after_ms = int(time.time() * 1000)
    assert [(c.env_index, c.chunk_seq, c.num_steps) for c in chunks] == [
        (0, 0, 2),
        (1, 0, 3),
        (1, 1, 1),
        (0, 1, 3),
    ]
    ended0, full1, truncated1, full0 = chunks

    # Env 0's first episode: the bootstrap row is the terminal observation from infos.
    np.testing.assert_array_equal(ended0.observations, np.vstack([rows(0, [0, 1]), FINAL]))
    np.testing.assert_array_equal(ended0.actions, [1, 2])
    np.testing.assert_array_equal(ended0.rewards, [1, 2])
    np.testing.assert_array_equal(ended0.terminated, [False, True])
    np.testing.assert_array_equal(ended0.truncated, [False, False])
    np.testing.assert_array_equal(ended0.log_probs, [-0.5, -1.0])
    assert (ended0.first_step, ended0.episode_return, ended0.episode_length) == (0, 3.0, 2)

    # Env 1's full chunk: cut at T, bootstrapped with the next observation, episode open.
    np.testing.assert_array_equal(full1.observations, rows(1, [0, 1, 2, 3]))
    np.testing.assert_array_equal(full1.actions, [11, 12, 13])
    np.testing.assert_array_equal(full1.log_probs, [-0.25, -0.5, -0.75])
    assert (full1.first_step, full1.episode_return, full1.episode_length) == (0, None, None)

    # Env 1's episode goes on into its next chunk and ends truncated: its final observation,
    # not the reset observation obs(4), is the bootstrap row.
    np.testing.assert_array_equal(truncated1.observations, np.vstack([rows(1, [3]), FINAL1]))
    np.testing.assert_array_equal(truncated1.truncated, [True])
    np.testing.assert_array_equal(truncated1.terminated, [False])
    assert truncated1.first_step == 3
    assert (truncated1.episode_return, truncated1.episode_length) == (20.0, 4)

    # Env 0's second episode starts at step 0 again, from the reset observation.
    np.testing.assert_array_equal(full0.observations, rows(0, [2, 3, 4, 5]))
    assert (full0.first_step, full0.episode_return) == (0, None)

    # The flush emits only env 1's one open step; env 0 has none.
    assert [(c.env_index, c.chunk_seq, c.num_steps) for c in flushed] == [(1, 2, 1)]
    np.testing.assert_array_equal(flushed[0].observations, rows(1, [4, 5]))
    assert (flushed[0].first_step, flushed[0].episode_return) == (0, None)
    assert flushed[0].episode_length is None
    assert chunker.flush() == []  # nothing is open any more
    assert chunker.episodes == 2

    for chunk in [*chunks, *flushed]:
        assert (chunk.run_id, chunk.worker_id, chunk.policy_version) == ("run-a", 4, 7)
        assert before_ms <= chunk.created_at_ms <= after_ms
        assert chunk.observations.dtype == np.uint8
        assert chunk.actions.dtype == np.int64
        assert chunk.rewards.dtype == np.float32
        assert chunk.terminated.dtype == chunk.truncated.dtype == np.bool_
        assert chunk.log_probs is not None and chunk.log_probs.dtype == np.float32
        assert chunk.values is None  # no worker computes value estimates


def test_without_behaviour_columns_there_are_none() -> None:
    _chunker, chunks, flushed = run(behaviour=False)
    assert len(chunks) == 4 and len(flushed) == 1
    assert all(c.log_probs is None and c.values is None for c in [*chunks, *flushed])


def test_chunk_seqs_beyond_float_precision_continue_exactly() -> None:
    # A float64 counter would round 2**60 + 1; chunk_seq is a 64-bit integer on the wire.
    chunker = Chunker("r", 0, 2, 1, (2,), np.dtype(np.uint8), behaviour=False)
    chunker.start(obs(0), version=0, next_seqs=[2**60 + 1, 3])
    no = np.zeros(2, bool)
    chunks = chunker.add(action(1), rewards(1), no, no, obs(1), {})
    assert [c.chunk_seq for c in chunks] == [2**60 + 1, 3]


def test_start_begins_a_new_episode_in_every_env() -> None:
    chunker = Chunker("r", 0, 2, 3, (2,), np.dtype(np.uint8), behaviour=False)
    chunker.start(obs(0), version=1)
    no = np.zeros(2, bool)
    chunker.add(action(1), rewards(1), no, no, obs(1), {})
    flushed = chunker.flush()
    chunker.start(obs(9), version=2)
    ended = np.ones(2, bool)
    infos = {"final_obs": np.array([FINAL, FINAL1], dtype=object), "_final_obs": ended}
    chunks = chunker.add(action(2), rewards(2), ended, no, obs(10), infos)
    assert [c.first_step for c in chunks] == [0, 0]
    assert [c.episode_return for c in chunks] == [2.0, 4.0]  # the old episode's reward is gone
    assert [c.chunk_seq for c in chunks] == [c.chunk_seq + 1 for c in flushed]
    np.testing.assert_array_equal(np.stack([c.observations[0] for c in chunks]), obs(9))
    assert chunker.last_obs is not None
    np.testing.assert_array_equal(chunker.last_obs, obs(10))


def test_a_chunker_before_start_refuses_to_add() -> None:
    chunker = Chunker("r", 0, 2, 3, (2,), np.dtype(np.uint8), behaviour=False)
    no = np.zeros(2, bool)
    with pytest.raises(RuntimeError, match=r"Chunker used before start\(\)"):
        chunker.add(action(1), rewards(1), no, no, obs(1), {})
    with pytest.raises(RuntimeError, match=r"call start\(obs, version\) first"):
        _ = chunker.last_obs


@pytest.mark.parametrize(
    "infos",
    [
        {},  # an env without SAME_STEP autoreset info
        {"final_obs": np.array([FINAL, None], dtype=object)},  # no mask
        {"final_obs": np.array([None, None], dtype=object), "_final_obs": np.zeros(2, bool)},
    ],
)
def test_an_ended_episode_without_its_final_observation_is_an_error(
    infos: dict[str, Any],
) -> None:
    chunker = Chunker("r", 0, 2, 3, (2,), np.dtype(np.uint8), behaviour=False)
    chunker.start(obs(0), version=1)
    no, env0 = np.zeros(2, bool), np.array([True, False])
    with pytest.raises(ConfigError, match=r'env\(s\) \[0\] ended an episode .* "final_obs"'):
        chunker.add(action(1), rewards(1), env0, no, obs(1), infos)
    with pytest.raises(ConfigError, match="SAME_STEP"):
        chunker.add(action(1), rewards(1), no, env0, obs(1), infos)  # truncated alike


def reference_chunks(
    n: int, t: int, steps: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
) -> list[tuple[int, int, int, list[float], list[int], float | None]]:
    """What each env's chunks must be, env by env in plain Python: (env, seq, first step,
    observations, actions, episode return) in the order the chunker emits them."""
    open_rows: list[list[tuple[float, int]]] = [[] for _ in range(n)]
    seq, start, ret = [0] * n, [0] * n, [0.0] * n
    last = [0.0] * n
    out = []
    for step, (next_obs, acts, done, final) in enumerate(steps):
        for i in range(n):
            open_rows[i].append((last[i], int(acts[i])))
            ret[i] += 1.0
            if done[i] or len(open_rows[i]) == t:
                bootstrap = float(final[i]) if done[i] else float(next_obs[i])
                obs_col = [o for o, _ in open_rows[i]] + [bootstrap]
                out.append((step, i, seq[i], start[i], obs_col, [a for _, a in open_rows[i]],
                            ret[i] if done[i] else None))  # fmt: skip
                seq[i] += 1
                start[i] = 0 if done[i] else start[i] + len(open_rows[i])
                ret[i] = 0.0 if done[i] else ret[i]
                open_rows[i] = []
            last[i] = float(next_obs[i])
    out.sort(key=lambda c: (c[0], c[1]))  # by step, then env: the chunker's order
    return [c[1:] for c in out]


def test_chunks_match_a_plain_per_env_cut_over_random_episode_ends() -> None:
    """Five envs, T = 4, 400 steps of episodes ending at random: the chunker's countdown
    of the fullest chunk and its one flat index per step cut exactly as env by env would."""
    n, t = 5, 4
    rng = np.random.default_rng(3)
    chunker = Chunker("run-r", 0, n, t, (), np.dtype(np.float32), behaviour=False)
    chunker.start(np.zeros(n, np.float32), version=0)
    steps, got = [], []
    for k in range(1, 401):
        next_obs = (np.arange(n) + 100.0 * k).astype(np.float32)
        final = next_obs - 0.5  # an ended episode's last observation, before its reset
        done = rng.random(n) < 0.15
        acts = rng.integers(0, 9, n)
        infos: dict[str, Any] = {"final_obs": final, "_final_obs": done} if done.any() else {}
        steps.append((next_obs, acts, done, final))
        got += chunker.add(
            Action(acts), np.ones(n, np.float32), done, np.zeros(n, bool), next_obs, infos
        )
    expected = reference_chunks(n, t, steps)
    assert len(got) == len(expected) > 400
    for chunk, (env, seq, first, obs_col, acts_col, ret) in zip(got, expected, strict=True):
        assert (chunk.env_index, chunk.chunk_seq, chunk.first_step) == (env, seq, first)
        np.testing.assert_array_equal(chunk.observations, obs_col)
        np.testing.assert_array_equal(chunk.actions, acts_col)
        assert chunk.episode_return == ret
