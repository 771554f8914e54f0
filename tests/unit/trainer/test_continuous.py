"""Continuous actions: Box envs, the Gaussian PPO policy, SAC, and the trainer's door."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from coach_stream.algorithms import builder_for, chunk_spec
from coach_stream.codec import ChunkSpec
from coach_stream.config import NetworkConfig, load_preset
from coach_stream.core import ExperienceChunk, LoadedPolicy, PolicyVersion
from coach_stream.envs import env_shape, make_vector_env, probe_shape
from coach_stream.errors import ConfigError, InvalidChunkError
from coach_stream.policies.networks import GaussianActorCritic, SquashedGaussianActor


def _chunk(actions: np.ndarray[Any, Any], run_id: str = "r") -> ExperienceChunk:
    t = len(actions)
    return ExperienceChunk(
        run_id=run_id,
        worker_id=0,
        env_index=0,
        chunk_seq=0,
        policy_version=0,
        first_step=0,
        observations=np.zeros((t + 1, 3), np.float32),
        actions=actions,
        rewards=np.zeros(t, np.float32),
        terminated=np.zeros(t, np.bool_),
        truncated=np.zeros(t, np.bool_),
        created_at_ms=0,
    )


def test_box_env_shape_and_clipping() -> None:
    shape = probe_shape("Pendulum-v1")
    assert shape.continuous and shape.action_shape == (1,) and shape.action_dtype == "float32"
    assert shape.action_low == (-2.0,) and shape.action_high == (2.0,)
    envs = make_vector_env("Pendulum-v1", 2)
    try:
        envs.reset(seed=[0, 0])
        # both envs start alike; torque 50 is clipped to 2, so the two rewards are equal
        _, rewards, *_ = envs.step(np.array([[50.0], [2.0]], np.float32))
        assert rewards[0] == pytest.approx(rewards[1])
        assert env_shape(envs) == shape
    finally:
        envs.close()
    assert not probe_shape("CartPole-v1").continuous


def test_chunk_spec_checks_continuous_actions() -> None:
    shape = probe_shape("Pendulum-v1")
    bounds = (shape.action_low, shape.action_high)
    spec = ChunkSpec("r", shape.obs_shape, shape.obs_dtype, shape.num_actions, "float32", (1,))
    bounded = ChunkSpec(
        "r", shape.obs_shape, shape.obs_dtype, shape.num_actions, "float32", (1,), bounds
    )
    fine = _chunk(np.array([[1.5], [-2.0]], np.float32))
    spec.check(fine)
    bounded.check(fine)
    outside = _chunk(np.array([[3.0], [0.0]], np.float32))
    spec.check(outside)  # a Gaussian PPO sample: the env clips it
    with pytest.raises(InvalidChunkError, match="outside the run's bounds"):
        bounded.check(outside)
    with pytest.raises(InvalidChunkError, match="NaN"):
        spec.check(_chunk(np.array([[np.nan]], np.float32)))
    with pytest.raises(InvalidChunkError, match=r"actions are int64\(2,\)"):
        spec.check(_chunk(np.array([0, 1], np.int64)))


def test_gaussian_ppo_log_prob_matches_the_actor() -> None:
    shape = probe_shape("Pendulum-v1")
    torch.manual_seed(0)
    net = GaussianActorCritic(shape, NetworkConfig(hidden_sizes=(8,)))
    raw = ["network.hidden_sizes=[8]", "normalize.observations=false", "normalize.rewards=false"]
    builder = builder_for(load_preset("pendulum-ppo", raw))
    actor = builder.make_actor(shape, greedy=False, seed=3)
    info = PolicyVersion("run", 1, "mem://1", "", 0, 0, 0, 0)
    actor.load(LoadedPolicy(info, dict(net.state_dict())))  # workers act in numpy from load
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    action = actor.act(obs)
    assert action.actions.shape == (5, 1) and action.actions.dtype == np.float32
    _, log_prob, entropy, _value = net.get_action_and_value(
        torch.from_numpy(obs), torch.from_numpy(action.actions)
    )
    assert action.log_probs is not None
    np.testing.assert_allclose(action.log_probs, log_prob.detach().numpy(), rtol=1e-5)
    assert entropy.shape == (5,)


def test_squashed_actor_stays_in_bounds_and_log_prob_is_finite() -> None:
    shape = probe_shape("Pendulum-v1")
    torch.manual_seed(0)
    net = SquashedGaussianActor(shape, NetworkConfig(hidden_sizes=(8,)))
    obs = torch.randn(1000, 3) * 10
    actions, log_prob = net.sample(obs)
    assert actions.abs().max() <= 2.0 and torch.isfinite(log_prob).all()
    assert net.greedy(obs).abs().max() <= 2.0


def test_sac_refuses_discrete_actions() -> None:
    builder = builder_for(load_preset("pendulum-sac", ["env_id=CartPole-v1"]))
    with pytest.raises(ConfigError, match="SAC needs continuous"):
        builder.make_actor(probe_shape("CartPole-v1"), greedy=False, seed=0)


def test_sac_needs_async_mode() -> None:
    with pytest.raises(ConfigError, match="mode 'async'"):
        load_preset("pendulum-sac", ["mode=sync"])


def test_gaussian_ppo_runs_versions_on_pendulum(in_process_run: Any) -> None:
    # two greedy episodes a round (the preset's 20 were 2 s of this test's 3.4)
    overrides = [
        "env_step_budget=2048",
        "rollout.num_envs=2",
        "ppo.num_steps=64",
        "eval_episodes=2",
    ]
    run = in_process_run(load_preset("pendulum-ppo", overrides), workers=2)
    run.start()
    finished = run.run(max_steps=100)
    assert finished is not None and finished.reason == "budget_exhausted"
    assert run.trainer.version >= 3
    progress = run.trainer_events.of("progress")[-1]
    assert progress["rollout/dropped_stale"] == 0
    assert run.eval_events.of("evaluation")  # the greedy Gaussian mean acted too


def test_chunk_spec_of_each_algorithm() -> None:
    shape = probe_shape("Pendulum-v1")
    sac = chunk_spec(load_preset("pendulum-sac"), "r", shape)
    assert sac.action_shape == (1,) and sac.action_bounds == ((-2.0,), (2.0,))
    assert chunk_spec(load_preset("pendulum-ppo"), "r", shape).action_bounds is None
    cartpole = chunk_spec(load_preset("cartpole-ppo"), "r", probe_shape("CartPole-v1"))
    assert (cartpole.action_dtype, cartpole.action_shape, cartpole.num_actions) == ("int64", (), 2)
