"""PPO's batch (GAE over segments of joined chunks, with their bootstrap rows) and its
learning-rate schedule."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from coach_stream.config import NetworkConfig
from coach_stream.core import ExperienceChunk
from coach_stream.envs import EnvShape
from coach_stream.policies.networks import ActorCritic
from coach_stream.testing.chunks import make_chunk
from coach_stream.trainer.ppo import PPO, PPOConfig, build_batch


def _chunk(first_features: list[float], rewards: list[float], terminated: bool) -> ExperienceChunk:
    """A chunk whose observation rows are ``[f, 0]``; the last row is the bootstrap row."""
    n = len(rewards)
    obs = np.zeros((n + 1, 2), np.float32)
    obs[:, 0] = first_features
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
        np.arange(n, dtype=np.int64),
        np.asarray(rewards, np.float32),
        term,
        np.zeros(n, np.bool_),
        log_probs=np.full(n, -0.5 - n, np.float32),
        values=np.zeros(n, np.float32),
    )


def test_batch_gae_by_hand_terminal_and_cut_chunks() -> None:
    # V(obs) = first feature, so every value below is readable from the observations.
    calls: list[int] = []

    def value_fn(obs: torch.Tensor) -> torch.Tensor:
        calls.append(len(obs))
        return obs[:, 0].clone()

    ended = _chunk([1.0, 2.0, 100.0], [1.0, 1.0], terminated=True)  # 100: never bootstrapped
    cut = _chunk([3.0, 4.0, 5.0], [0.5, 2.0], terminated=False)  # cut: bootstraps V = 5
    batch = build_batch([ended, cut], value_fn, gamma=0.9, lam=0.8)

    # ended: d1 = 1 - 2 = -1; d0 = 1 + 0.9*2 - 1 = 1.8; A0 = 1.8 + 0.9*0.8*(-1) = 1.08
    # cut:   d1 = 2 + 0.9*5 - 4 = 2.5; d0 = 0.5 + 0.9*4 - 3 = 1.1; A0 = 1.1 + 0.72*2.5 = 2.9
    expected_adv = [1.08, -1.0, 2.9, 2.5]
    assert batch.advantages.tolist() == pytest.approx(expected_adv, abs=1e-6)
    assert batch.values.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert batch.returns.tolist() == pytest.approx([2.08, 1.0, 5.9, 6.5], abs=1e-6)
    # bootstrap rows are valued (one forward pass over all 6 rows) but not trained on
    assert calls == [6]
    assert batch.observations[:, 0].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert batch.actions.tolist() == [0, 1, 0, 1]
    assert batch.log_probs.tolist() == [-2.5] * 4
    assert batch.size == 4


def test_batch_refuses_chunks_without_behaviour_log_probs() -> None:
    chunk = _chunk([1.0, 2.0], [1.0], terminated=False)
    bare = ExperienceChunk(**{**chunk.__dict__, "log_probs": None})
    with pytest.raises(ValueError, match="log-probs"):
        build_batch([chunk, bare], lambda obs: obs[:, 0], gamma=0.9, lam=0.8)


def test_learning_rate_anneals_linearly_to_a_five_percent_floor() -> None:
    config = PPOConfig(learning_rate=1e-3, anneal_lr=True)
    net = ActorCritic(EnvShape((2,), 2), NetworkConfig(hidden_sizes=(4,)))
    ppo = PPO(net, config, steps_per_update=8, anneal_steps=1000, generator=torch.Generator())
    assert ppo.learning_rate(0) == pytest.approx(1e-3)
    assert ppo.learning_rate(500) == pytest.approx(5e-4)
    assert ppo.learning_rate(990) == pytest.approx(5e-5)  # 1 % left: the floor holds
    assert ppo.learning_rate(10_000) == pytest.approx(5e-5)
    constant = PPO(net, PPOConfig(learning_rate=1e-3, anneal_lr=False), 8, 1000, torch.Generator())
    assert constant.learning_rate(990) == pytest.approx(1e-3)


# ---------------------------------------------------------------- segments across chunk cuts


def _episode_piece(
    whole: ExperienceChunk, start: int, stop: int, **fields: object
) -> ExperienceChunk:
    """Steps ``start:stop`` of ``whole`` as the chunker would cut them (rows start..stop)."""
    piece = dataclasses.replace(
        whole,
        chunk_seq=whole.chunk_seq + (1 if start else 0),
        first_step=whole.first_step + start,
        observations=whole.observations[start : stop + 1],
        actions=whole.actions[start:stop],
        rewards=whole.rewards[start:stop],
        terminated=whole.terminated[start:stop],
        truncated=whole.truncated[start:stop],
        log_probs=None if whole.log_probs is None else whole.log_probs[start:stop],
        values=None if whole.values is None else whole.values[start:stop],
    )
    return dataclasses.replace(piece, **fields)


def _value_fn(obs: torch.Tensor) -> torch.Tensor:
    return obs[:, 0] * 0.5 - obs[:, 1] * 0.25  # any fixed function of the row


@pytest.mark.parametrize("ended", [True, False])
def test_two_contiguous_chunks_give_the_advantages_of_one_chunk_holding_both(
    ended: bool,
) -> None:
    whole = make_chunk(steps=9, obs_shape=(3,), seed=4, ended=ended)
    first, second = _episode_piece(whole, 0, 5), _episode_piece(whole, 5, 9)
    assert first.chunk_seq + 1 == second.chunk_seq and not first.episode_ended
    one = build_batch([whole], _value_fn, gamma=0.99, lam=0.95)
    for order in ([first, second], [second, first]):  # the log order within a batch is free
        two = build_batch(order, _value_fn, gamma=0.99, lam=0.95)
        assert two.joins == 1 and two.cut_bootstraps == (0 if ended else 1)
        np.testing.assert_array_equal(two.advantages.numpy(), one.advantages.numpy())
        np.testing.assert_array_equal(two.returns.numpy(), one.returns.numpy())
        np.testing.assert_array_equal(two.observations.numpy(), one.observations.numpy())
        np.testing.assert_array_equal(two.actions.numpy(), one.actions.numpy())
        np.testing.assert_array_equal(two.log_probs.numpy(), one.log_probs.numpy())


def test_three_pieces_and_another_env_interleaved_are_joined_per_env() -> None:
    whole = make_chunk(steps=12, seed=5, ended=False)
    other = make_chunk(steps=6, seed=6, ended=True)
    other = dataclasses.replace(other, env_index=whole.env_index + 1)
    a, b = _episode_piece(whole, 0, 4), _episode_piece(whole, 4, 8)
    c = _episode_piece(whole, 8, 12, chunk_seq=whole.chunk_seq + 2)
    batch = build_batch([a, other, b, c], _value_fn, gamma=0.9, lam=0.8)
    alone = build_batch([whole], _value_fn, gamma=0.9, lam=0.8)
    other_alone = build_batch([other], _value_fn, gamma=0.9, lam=0.8)
    assert batch.joins == 2 and batch.cut_bootstraps == 1  # whole's end is a real cut
    np.testing.assert_array_equal(batch.advantages[:12].numpy(), alone.advantages.numpy())
    np.testing.assert_array_equal(batch.advantages[12:].numpy(), other_alone.advantages.numpy())


@pytest.mark.parametrize(
    "change",
    [
        {"chunk_seq": 9},  # a gap in chunk_seq (a chunk is missing)
        {"policy_version": 12},  # acted with another version
        {"env_index": 5},  # another env of the same worker
        {"worker_id": 4},  # the same env index of another worker
        {"first_step": 47},  # a step missing within the episode (46 would continue)
    ],
)
def test_chunks_that_do_not_continue_each_other_are_not_joined(change: dict[str, object]) -> None:
    whole = make_chunk(steps=10, seed=7, ended=False)
    first = _episode_piece(whole, 0, 6)
    second = _episode_piece(whole, 6, 10, **change)
    batch = build_batch([first, second], _value_fn, gamma=0.9, lam=0.8)
    separate = np.concatenate(
        [
            build_batch([ch], _value_fn, gamma=0.9, lam=0.8).advantages.numpy()
            for ch in (first, second)
        ]
    )
    assert batch.joins == 0 and batch.cut_bootstraps == 2
    np.testing.assert_array_equal(batch.advantages.numpy(), separate)
    # and the join would have changed them: the first chunk's cut bootstraps from the critic
    joined = build_batch([first, _episode_piece(whole, 6, 10)], _value_fn, gamma=0.9, lam=0.8)
    assert not np.allclose(joined.advantages[:6].numpy(), separate[:6])


def test_a_chunk_after_its_episode_ended_starts_a_new_segment() -> None:
    ended = make_chunk(steps=4, seed=8, ended=True)
    fresh = dataclasses.replace(
        make_chunk(steps=3, seed=9, ended=False),
        chunk_seq=ended.chunk_seq + 1,
        first_step=ended.first_step
        + 4,  # cannot happen (a new episode starts at 0): the flag decides
        observations=np.vstack([ended.observations[-1:], make_chunk(steps=2, seed=9).observations]),
    )
    batch = build_batch([ended, fresh], _value_fn, gamma=0.9, lam=0.8)
    assert batch.joins == 0 and batch.cut_bootstraps == 1


def test_a_learner_update_logs_its_joins() -> None:
    whole = make_chunk(steps=8, obs_shape=(2,), seed=10, ended=False)
    pieces = [_episode_piece(whole, 0, 4), _episode_piece(whole, 4, 8)]
    net = ActorCritic(EnvShape((2,), 6), NetworkConfig(hidden_sizes=(4,)))
    ppo = PPO(net, PPOConfig(minibatch_size=4), 8, 1000, torch.Generator().manual_seed(0))
    assert ppo.ingest(pieces, version=whole.policy_version).used_steps == 8 and ppo.ready()
    metrics, publish = ppo.learn(env_steps=8)
    assert publish and metrics["chunk_joins"] == 1.0 and metrics["cut_bootstraps"] == 1.0


def test_a_next_chunk_whose_first_row_is_not_the_bootstrap_row_is_not_joined() -> None:
    whole = make_chunk(steps=6, seed=11, ended=False)
    first, second = _episode_piece(whole, 0, 3), _episode_piece(whole, 3, 6)
    moved = second.observations.copy()
    moved[0] += 1.0
    batch = build_batch(
        [first, dataclasses.replace(second, observations=moved)], _value_fn, 0.9, 0.8
    )
    assert batch.joins == 0


def test_frames_stay_uint8_in_the_batch() -> None:
    # the network scales frames on the trainer's device; a float32 copy here is 4x the bytes
    chunk = make_chunk(4, obs_shape=(7, 7, 3), obs_dtype="uint8")
    seen: list[torch.dtype] = []

    def value_fn(obs: torch.Tensor) -> torch.Tensor:
        seen.append(obs.dtype)
        return torch.zeros(len(obs))

    batch = build_batch([chunk], value_fn, gamma=0.99, lam=0.95)
    assert seen == [torch.uint8]
    assert batch.observations.dtype == torch.uint8 and batch.observations.shape == (4, 7, 7, 3)
