"""PPO/IMPALA workers act MLP policies in numpy: the same policy as the torch network."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coach_stream.config import NetworkConfig
from coach_stream.core import LoadedPolicy, PolicyVersion
from coach_stream.envs import EnvShape
from coach_stream.policies.actors import NumpyMLP, PPOActor
from coach_stream.policies.networks import ActorCritic


def _policy(net: ActorCritic, version: int) -> LoadedPolicy:
    info = PolicyVersion("run", version, f"mem://{version}", "", 0, 0, 0, 0)
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

    both = NumpyMLP.side_by_side(net.actor, net.critic)(x)
    np.testing.assert_allclose(both[:, :3], logits.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(both[:, 3], values.numpy(), rtol=1e-5, atol=1e-6)


def test_side_by_side_refuses_mlps_of_different_depths() -> None:
    net = ActorCritic(EnvShape((5,), 3), NetworkConfig(hidden_sizes=(16, 8)))
    other = ActorCritic(EnvShape((5,), 3), NetworkConfig(hidden_sizes=(16,)))
    with pytest.raises(TypeError, match="same depth"):
        NumpyMLP.side_by_side(net.actor, other.critic)


def test_log_probs_and_values_are_the_networks_and_actions_follow_its_probabilities() -> None:
    torch.manual_seed(1)
    net = ActorCritic(EnvShape((4,), 3), NetworkConfig())
    with torch.no_grad():  # a policy far from uniform, so a wrong sampler shows
        net.actor[-1].weight.mul_(300.0)
    actor = PPOActor(ActorCritic(EnvShape((4,), 3), NetworkConfig()), greedy=False, seed=3)
    actor.load(_policy(net, 7))
    obs = np.tile(np.array([[0.3, -0.2, 0.1, 0.5]], dtype=np.float32), (20_000, 1))
    action = actor.act(obs)
    with torch.no_grad():
        logits, values = net.logits_and_value(torch.as_tensor(obs[:1]))
    probs = torch.softmax(logits, -1).numpy()[0]
    log_p = torch.log_softmax(logits, -1).numpy()[0]
    assert action.actions.dtype == np.int64 and set(np.unique(action.actions)) <= {0, 1, 2}
    frequencies = np.bincount(action.actions, minlength=3) / len(obs)
    np.testing.assert_allclose(frequencies, probs, atol=0.015)
    assert action.log_probs is not None and action.values is not None
    np.testing.assert_allclose(action.log_probs, log_p[action.actions], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(action.values, values.numpy()[0], rtol=1e-5, atol=1e-6)


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
