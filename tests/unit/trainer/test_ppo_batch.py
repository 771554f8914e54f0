"""PPO's batch (GAE over chunks with their bootstrap rows) and its learning-rate schedule."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coach_stream.config import NetworkConfig, PPOConfig
from coach_stream.core import ExperienceChunk
from coach_stream.envs import EnvShape
from coach_stream.policies.networks import ActorCritic
from coach_stream.trainer.ppo import PPO, build_batch


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
