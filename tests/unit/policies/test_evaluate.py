"""``evaluate``: the policy terms at the acted rows and every row's value from one pass."""

from __future__ import annotations

import torch

from coach_stream.config import NetworkConfig
from coach_stream.envs import EnvShape
from coach_stream.policies.networks import ActorCritic, GaussianActorCritic


def test_a_cnn_actor_critic_encodes_each_frame_once_and_matches_two_passes() -> None:
    torch.manual_seed(0)
    net = ActorCritic(EnvShape((4, 84, 84), 6, "uint8"), NetworkConfig())
    assert net.encoder is not None
    encoded: list[int] = []
    net.encoder.register_forward_hook(lambda _m, args, _out: encoded.append(len(args[0])))
    obs = torch.randint(0, 256, (10, 4, 84, 84), dtype=torch.uint8)
    rows = torch.tensor([True] * 4 + [False] + [True] * 4 + [False])  # two chunks' bootstraps
    actions = torch.tensor([0, 5, 2, 3, 1, 1, 4, 0])
    log_prob, entropy, values = net.evaluate(obs, rows, actions)
    assert encoded == [10]  # one pass over every row, bootstrap rows included
    _, want_log_prob, want_entropy, _ = net.get_action_and_value(obs[rows], actions)
    want_values = net.get_value(obs)
    torch.testing.assert_close(log_prob, want_log_prob)
    torch.testing.assert_close(entropy, want_entropy)
    torch.testing.assert_close(values, want_values)
    assert log_prob.shape == entropy.shape == (8,) and values.shape == (10,)


def test_a_gaussian_actor_critic_evaluates_the_same_terms() -> None:
    torch.manual_seed(0)
    shape = EnvShape((3,), 2, action_shape=(2,), action_low=(-1.0, -1.0), action_high=(1, 1))
    net = GaussianActorCritic(shape, NetworkConfig())
    obs, rows = torch.randn(5, 3), torch.tensor([True, True, False, True, False])
    actions = torch.randn(3, 2)
    log_prob, entropy, values = net.evaluate(obs, rows, actions)
    _, want_log_prob, want_entropy, _ = net.get_action_and_value(obs[rows], actions)
    torch.testing.assert_close(log_prob, want_log_prob)
    torch.testing.assert_close(entropy, want_entropy)
    torch.testing.assert_close(values, net.get_value(obs))
