"""Gaussian MLP policies sample in one compiled call (numba): PPO's diagonal Gaussian and
SAC's squashed one give the numpy act's actions (and PPO's log-densities) from
the same normal draws, within float32 rounding (the compiled tanh is a rational within a
few ulp of libm's)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from coach_stream.config import NetworkConfig
from coach_stream.core import LoadedPolicy, PolicyVersion
from coach_stream.envs import EnvShape
from coach_stream.policies import actors
from coach_stream.policies.actors import GaussianPPOActor, SACActor
from coach_stream.policies.networks import GaussianActorCritic, SquashedGaussianActor

INFO = PolicyVersion("run", 3, "mem://3", "", 0, 0, 0, 0)


def _shape(obs_dim: int, dims: int) -> EnvShape:
    low, high = tuple(-2.0 + 0.5 * d for d in range(dims)), tuple(1.0 + d for d in range(dims))
    return EnvShape((obs_dim,), dims, action_shape=(dims,), action_low=low, action_high=high)


def _policy(net: torch.nn.Module) -> LoadedPolicy:
    return LoadedPolicy(INFO, {k: v.clone() for k, v in net.state_dict().items()})


def _pair(actor_type: Any, net_type: Any, dims: int, config: NetworkConfig) -> list[Any]:
    """A compiled actor and its numpy twin, holding the same policy version."""
    torch.manual_seed(dims + len(config.hidden_sizes))
    policy = _policy(net_type(_shape(5, dims), config))
    pair = []
    for compiled in (True, False):
        actor = actor_type(net_type(_shape(5, dims), config), False, 7, compiled=compiled)
        actor.load(policy)
        pair.append(actor)
    return pair


def _ppo_pair(dims: int, hidden: tuple[int, ...], activation: str) -> list[GaussianPPOActor]:
    config = NetworkConfig(hidden_sizes=hidden, activation=activation, log_std_init=-0.7)
    return _pair(GaussianPPOActor, GaussianActorCritic, dims, config)


def _sac_pair(dims: int, hidden: tuple[int, ...], activation: str) -> list[SACActor]:
    config = NetworkConfig(hidden_sizes=hidden, activation=activation)
    return _pair(SACActor, SquashedGaussianActor, dims, config)


def _obs(rows: int) -> Any:
    return (np.random.default_rng(rows).normal(size=(rows, 5)) * 2).astype(np.float32)


@pytest.mark.parametrize(("hidden", "activation"), [((64, 64), "tanh"), ((7,), "relu")])
@pytest.mark.parametrize(("dims", "rows"), [(1, 1), (6, 1), (3, 8), (2, 33)])
def test_the_compiled_gaussian_act_is_the_numpy_act(
    hidden: tuple[int, ...], activation: str, dims: int, rows: int
) -> None:
    fast, slow = _ppo_pair(dims, hidden, activation)
    assert fast.compiled and not slow.compiled
    obs = _obs(rows)
    for _ in range(3):  # the same draws, act after act
        got, want = fast.act(obs), slow.act(obs)
        assert got.actions.shape == want.actions.shape == (rows, dims)
        assert got.actions.dtype == np.float32 and got.log_probs is not None
        assert want.log_probs is not None
        np.testing.assert_allclose(got.actions, want.actions, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got.log_probs, want.log_probs, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(("hidden", "activation"), [((256, 256), "relu"), ((6,), "tanh")])
@pytest.mark.parametrize(("dims", "rows"), [(1, 1), (6, 1), (3, 8), (2, 33)])
def test_the_compiled_squashed_act_is_the_numpy_act(
    hidden: tuple[int, ...], activation: str, dims: int, rows: int
) -> None:
    fast, slow = _sac_pair(dims, hidden, activation)
    assert fast.compiled and not slow.compiled
    obs = _obs(rows)
    shape = _shape(5, dims)
    for _ in range(3):
        got, want = fast.act(obs).actions, slow.act(obs).actions
        assert got.shape == want.shape == (rows, dims) and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert np.all(got >= np.array(shape.action_low) - 1e-6)  # squashed into the bounds
        assert np.all(got <= np.array(shape.action_high) + 1e-6)


def test_greedy_actors_and_a_missing_numba_act_in_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    config = NetworkConfig(hidden_sizes=(8,))
    assert not GaussianPPOActor(GaussianActorCritic(_shape(5, 2), config), True, 0).compiled
    assert not SACActor(SquashedGaussianActor(_shape(5, 2), config), True, 0).compiled
    monkeypatch.setattr(actors, "compiled_kernels", lambda: None)
    without = SACActor(SquashedGaussianActor(_shape(5, 2), config), False, 0)
    assert not without.compiled
    assert without.act(_obs(3)).actions.shape == (3, 2)


def test_a_failing_compiled_act_hands_over_to_numpy_for_good(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls = []

    def refuse(*args: object) -> None:
        calls.append(1)
        raise RuntimeError("LLVM could not compile this")

    fast, _ = _ppo_pair(2, (8,), "tanh")
    sac_fast, _ = _sac_pair(2, (8,), "tanh")
    broken = type("Kernels", (), {"TANH": 1, "RELU": 2, "gaussian_act": staticmethod(refuse),
                                  "squashed_gaussian_act": staticmethod(refuse)})  # fmt: skip
    monkeypatch.setattr(fast, "_kernels", broken)
    monkeypatch.setattr(sac_fast, "_kernels", broken)
    obs = _obs(3)
    for actor in (fast, sac_fast):
        assert actor.act(obs).actions.shape == (3, 2) == actor.act(obs).actions.shape
    assert calls == [1, 1] and not fast.compiled and not sac_fast.compiled
    assert "the compiled act failed (LLVM could not compile this)" in caplog.text
