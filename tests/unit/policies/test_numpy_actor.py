"""Workers act MLP policies in numpy (PPO and IMPALA, Gaussian PPO, SAC): the same policy as
the torch network."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coach_stream.config import NetworkConfig
from coach_stream.core import LoadedPolicy, PolicyVersion
from coach_stream.envs import EnvShape
from coach_stream.policies.actors import GaussianPPOActor, PPOActor, SACActor
from coach_stream.policies.networks import (
    ActorCritic,
    GaussianActorCritic,
    SquashedGaussianActor,
    normal_log_prob,
)
from coach_stream.policies.numpy_mlp import NumpyMLP

BOX = EnvShape((3,), 2, action_shape=(2,), action_low=(-2.0, 0.0), action_high=(2.0, 1.0))


def _policy(net: torch.nn.Module, version: int, env_steps: int = 0) -> LoadedPolicy:
    info = PolicyVersion("run", version, f"mem://{version}", "", 0, env_steps, 0, 0)
    return LoadedPolicy(info, {k: v.clone() for k, v in net.state_dict().items()})


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_numpy_mlp_is_the_torch_mlp(activation: str) -> None:
    torch.manual_seed(0)
    net = ActorCritic(EnvShape((5,), 3), NetworkConfig(hidden_sizes=(16, 8), activation=activation))
    x = np.random.default_rng(0).normal(size=(7, 5)).astype(np.float32)
    with torch.no_grad():
        logits, values = net.logits_and_value(torch.as_tensor(x))
    np.testing.assert_allclose(NumpyMLP(net.actor)(x), logits.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(NumpyMLP(net.critic)(x)[:, 0], values.numpy(), rtol=1e-5, atol=1e-6)


def test_log_probs_are_the_networks_and_actions_follow_its_probabilities() -> None:
    torch.manual_seed(1)
    net = ActorCritic(EnvShape((4,), 3), NetworkConfig())
    with torch.no_grad():  # a policy far from uniform, so a wrong sampler shows
        net.actor[-1].weight.mul_(300.0)
    actor = PPOActor(ActorCritic(EnvShape((4,), 3), NetworkConfig()), greedy=False, seed=3)
    actor.load(_policy(net, 7))
    obs = np.tile(np.array([[0.3, -0.2, 0.1, 0.5]], dtype=np.float32), (20_000, 1))
    action = actor.act(obs)
    with torch.no_grad():
        logits = net.logits(torch.as_tensor(obs[:1]))
    probs = torch.softmax(logits, -1).numpy()[0]
    log_p = torch.log_softmax(logits, -1).numpy()[0]
    assert action.actions.dtype == np.int64 and set(np.unique(action.actions)) <= {0, 1, 2}
    frequencies = np.bincount(action.actions, minlength=3) / len(obs)
    np.testing.assert_allclose(frequencies, probs, atol=0.015)
    assert action.log_probs is not None
    np.testing.assert_allclose(action.log_probs, log_p[action.actions], rtol=1e-5, atol=1e-5)


def test_greedy_takes_the_mode_and_a_new_version_replaces_the_numpy_weights() -> None:
    torch.manual_seed(2)
    shape, config = EnvShape((4,), 2), NetworkConfig()
    first, second = ActorCritic(shape, config), ActorCritic(shape, config)
    with torch.no_grad():
        first.actor[-1].bias.copy_(torch.tensor([9.0, -9.0]))
        second.actor[-1].bias.copy_(torch.tensor([-9.0, 9.0]))
    actor = PPOActor(ActorCritic(shape, config), greedy=True, seed=0)
    obs = np.zeros((3, 4), dtype=np.float32)
    actor.load(_policy(first, 1))
    assert actor.act(obs).actions.tolist() == [0, 0, 0]
    actor.load(_policy(second, 2))
    assert actor.act(obs).actions.tolist() == [1, 1, 1] and actor.version == 2


def test_the_same_seed_acts_the_same_and_frames_stay_on_torch() -> None:
    torch.manual_seed(4)
    net = ActorCritic(EnvShape((4,), 2), NetworkConfig())
    obs = np.random.default_rng(1).normal(size=(64, 4)).astype(np.float32)
    acts = []
    for _ in range(2):
        actor = PPOActor(ActorCritic(EnvShape((4,), 2), NetworkConfig()), greedy=False, seed=5)
        actor.load(_policy(net, 0))
        acts.append(actor.act(obs).actions)
    np.testing.assert_array_equal(acts[0], acts[1])
    cnn = ActorCritic(EnvShape((7, 7, 3), 4, "uint8"), NetworkConfig())
    frames = PPOActor(ActorCritic(EnvShape((7, 7, 3), 4, "uint8"), NetworkConfig()), False, 0)
    frames.load(_policy(cnn, 0))
    assert frames._numpy is None  # the CNN acts in torch
    assert frames.act(np.zeros((2, 7, 7, 3), dtype=np.uint8)).actions.shape == (2,)


def test_gaussian_ppo_acts_the_networks_gaussian_with_its_log_probs() -> None:
    torch.manual_seed(5)
    net = GaussianActorCritic(BOX, NetworkConfig(hidden_sizes=(16, 16)))
    with torch.no_grad():
        net.actor_logstd.copy_(torch.tensor([[-1.0, 0.5]]))
    actor = GaussianPPOActor(
        GaussianActorCritic(BOX, NetworkConfig(hidden_sizes=(16, 16))), False, 3
    )
    actor.load(_policy(net, 1))
    obs = np.tile(np.array([[0.4, -0.3, 0.2]], dtype=np.float32), (40_000, 1))
    action = actor.act(obs)
    x = torch.as_tensor(obs)
    with torch.no_grad():
        mean, log_std = net.mean_and_log_std(x)
        log_prob = normal_log_prob(torch.as_tensor(action.actions), mean, log_std).sum(-1)
    assert action.actions.shape == (40_000, 2) and action.actions.dtype == np.float32
    np.testing.assert_allclose(action.actions.mean(0), mean[0].numpy(), atol=0.03)
    np.testing.assert_allclose(action.actions.std(0), [np.exp(-1.0), np.exp(0.5)], rtol=0.02)
    assert action.log_probs is not None
    np.testing.assert_allclose(action.log_probs, log_prob.numpy(), rtol=1e-4, atol=1e-4)
    greedy = GaussianPPOActor(
        GaussianActorCritic(BOX, NetworkConfig(hidden_sizes=(16, 16))), True, 0
    )
    greedy.load(_policy(net, 1))
    np.testing.assert_allclose(greedy.act(obs[:2]).actions, mean[:2].numpy(), rtol=1e-5, atol=1e-6)


def test_sac_acts_the_squashed_gaussian_of_its_torso_in_the_bounds() -> None:
    torch.manual_seed(6)
    net = SquashedGaussianActor(BOX, NetworkConfig(hidden_sizes=(16, 16)))
    obs = np.tile(np.array([[0.1, 0.7, -0.5]], dtype=np.float32), (40_000, 1))
    greedy = SACActor(SquashedGaussianActor(BOX, NetworkConfig(hidden_sizes=(16, 16))), True, 0)
    greedy.load(_policy(net, 1))
    with torch.no_grad():
        mean, log_std = net(torch.as_tensor(obs[:2]))
        expected = net.greedy(torch.as_tensor(obs[:2])).numpy()
    np.testing.assert_allclose(greedy.act(obs[:2]).actions, expected, rtol=1e-5, atol=1e-6)

    actor = SACActor(SquashedGaussianActor(BOX, NetworkConfig(hidden_sizes=(16, 16))), False, 4)
    actor.load(_policy(net, 2))
    actions = actor.act(obs).actions
    assert actions.shape == (40_000, 2) and actions.dtype == np.float32
    assert (actions >= [-2.0, 0.0]).all() and (actions <= [2.0, 1.0]).all()
    # undo the squashing: the samples are the torso's Gaussian
    pre_squash = np.arctanh(np.clip((actions - [0.0, 0.5]) / [2.0, 0.5], -1 + 1e-6, 1 - 1e-6))
    np.testing.assert_allclose(pre_squash.mean(0), mean[0].numpy(), atol=0.03)
    np.testing.assert_allclose(pre_squash.std(0), log_std[0].exp().numpy(), rtol=0.03)


def test_sac_acts_uniformly_in_the_bounds_until_the_trainer_has_its_learning_starts() -> None:
    net = SquashedGaussianActor(BOX, NetworkConfig(hidden_sizes=(8,)))
    actor = SACActor(SquashedGaussianActor(BOX, NetworkConfig(hidden_sizes=(8,))), False, 1, 100)
    obs = np.zeros((20_000, 3), dtype=np.float32)
    actor.load(_policy(net, 1, env_steps=99))
    uniform = actor.act(obs).actions
    np.testing.assert_allclose(uniform.min(0), [-2.0, 0.0], atol=0.01)
    np.testing.assert_allclose(uniform.max(0), [2.0, 1.0], atol=0.01)
    np.testing.assert_allclose(uniform.mean(0), [0.0, 0.5], atol=0.02)
    actor.load(_policy(net, 2, env_steps=100))  # the untrained torso: near the bounds' middle
    assert np.abs(actor.act(obs).actions.mean(0) - [0.0, 0.5]).max() < 0.1


def test_a_continuous_actor_with_the_same_seed_acts_the_same() -> None:
    torch.manual_seed(8)
    obs = np.random.default_rng(2).normal(size=(64, 3)).astype(np.float32)
    for actor_type, net_type in (
        (SACActor, SquashedGaussianActor),
        (GaussianPPOActor, GaussianActorCritic),
    ):
        net = net_type(BOX, NetworkConfig())
        acts = []
        for _ in range(2):
            actor = actor_type(net_type(BOX, NetworkConfig()), False, 7)  # type: ignore[arg-type]
            actor.load(_policy(net, 0))
            acts.append(actor.act(obs).actions)
        np.testing.assert_array_equal(acts[0], acts[1])
