"""A categorical MLP policy samples in one compiled call (numba): the same actions as the
numpy act from the same draws, the same log-probabilities."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coach_stream.config import NetworkConfig
from coach_stream.core import LoadedPolicy, PolicyVersion
from coach_stream.envs import EnvShape
from coach_stream.policies import actors, compiled
from coach_stream.policies.actors import PPOActor
from coach_stream.policies.networks import ActorCritic


def _pair(
    obs_dim: int, num_actions: int, hidden: tuple[int, ...], activation: str, sharpen: float
) -> tuple[PPOActor, PPOActor]:
    torch.manual_seed(len(hidden) + num_actions)
    config = NetworkConfig(hidden_sizes=hidden, activation=activation)
    net = ActorCritic(EnvShape((obs_dim,), num_actions), config)
    with torch.no_grad():  # logits of several units, so every branch of the draw is taken
        net.actor[-1].weight.mul_(sharpen)
    info = PolicyVersion("run", 3, "mem://3", "", 0, 0, 0, 0)
    policy = LoadedPolicy(info, {k: v.clone() for k, v in net.state_dict().items()})
    pair = []
    for use_compiled in (True, False):
        actor = PPOActor(ActorCritic(EnvShape((obs_dim,), num_actions), config), False, 11,
                         compiled=use_compiled)  # fmt: skip
        actor.load(policy)
        pair.append(actor)
    return pair[0], pair[1]


@pytest.mark.parametrize(
    ("hidden", "activation", "num_actions"),
    [((64, 64), "tanh", 2), ((7,), "relu", 5), ((5, 6, 7), "tanh", 3), ((16, 8), "relu", 18)],
)
@pytest.mark.parametrize("rows", [1, 2, 3, 8, 33])
def test_the_compiled_act_is_the_numpy_act(
    hidden: tuple[int, ...], activation: str, num_actions: int, rows: int
) -> None:
    fast, slow = _pair(4, num_actions, hidden, activation, sharpen=40.0)
    assert fast.compiled and not slow.compiled
    obs = np.random.default_rng(rows).normal(size=(rows, 4)).astype(np.float32) * 3
    for _ in range(3):  # the same draws, act after act
        got, want = fast.act(obs), slow.act(obs)
        np.testing.assert_array_equal(got.actions, want.actions)
        assert got.actions.dtype == np.int64 and got.log_probs is not None
        assert got.log_probs.dtype == np.float32
        np.testing.assert_allclose(got.log_probs, want.log_probs, rtol=1e-4, atol=1e-5)


def test_the_draws_cover_every_action_in_proportion() -> None:
    fast, _ = _pair(4, 3, (16,), "tanh", sharpen=1.0)
    obs = np.tile(np.array([[0.3, -0.2, 0.1, 0.5]], dtype=np.float32), (30_000, 1))
    action = fast.act(obs)
    assert action.log_probs is not None
    probs = np.exp([action.log_probs[action.actions == a][0] for a in range(3)])
    counts = np.bincount(action.actions, minlength=3) / len(obs)
    np.testing.assert_allclose(counts, probs, atol=0.015)  # 30,000 draws: sd < 0.003


def test_a_read_only_or_strided_observation_is_acted_on_alike() -> None:
    fast, slow = _pair(4, 2, (64, 64), "tanh", sharpen=40.0)
    obs = np.random.default_rng(0).normal(size=(8, 8)).astype(np.float64)[:, ::2]
    frozen = np.ascontiguousarray(obs, dtype=np.float32)
    frozen.flags.writeable = False
    np.testing.assert_array_equal(fast.act(obs).actions, slow.act(obs).actions)
    np.testing.assert_array_equal(fast.act(frozen).actions, slow.act(frozen).actions)


def test_the_fast_tanh_is_within_a_few_ulp_of_libms() -> None:
    x = np.linspace(-12.0, 12.0, 200_001, dtype=np.float32)
    out = np.empty_like(x)
    compiled._activate(x, out, compiled.TANH)
    assert np.abs(out - np.tanh(x)).max() < 4e-7


def test_greedy_actors_and_a_missing_numba_act_in_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    config = NetworkConfig(hidden_sizes=(8,))
    greedy = PPOActor(ActorCritic(EnvShape((4,), 2), config), greedy=True, seed=0)
    info = PolicyVersion("run", 1, "mem://1", "", 0, 0, 0, 0)
    greedy.load(LoadedPolicy(info, dict(greedy.net.state_dict())))
    assert not greedy.compiled
    monkeypatch.setattr(actors, "compiled_kernels", lambda: None)
    without = PPOActor(ActorCritic(EnvShape((4,), 2), config), greedy=False, seed=0)
    without.load(LoadedPolicy(info, dict(without.net.state_dict())))
    assert not without.compiled
    assert without.act(np.zeros((3, 4), np.float32)).actions.shape == (3,)


def test_a_compiled_act_that_fails_hands_over_to_numpy_for_good(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fast, _ = _pair(4, 2, (8,), "tanh", sharpen=1.0)
    calls = []

    def refuse(*args: object) -> None:
        calls.append(1)
        raise RuntimeError("LLVM could not compile this")

    broken = type("Kernels", (), {"TANH": 1, "RELU": 2, "categorical_act": staticmethod(refuse)})
    monkeypatch.setattr(fast, "_kernels", broken)
    obs = np.zeros((3, 4), np.float32)
    assert fast.act(obs).actions.shape == (3,) and fast.act(obs).actions.shape == (3,)
    assert calls == [1] and not fast.compiled
    assert "the compiled act failed (LLVM could not compile this)" in caplog.text
