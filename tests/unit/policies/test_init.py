"""``network.log_std_init`` and ``network.ortho_init``: rl-zoo's MuJoCo PPO settings."""

from __future__ import annotations

import math

import torch

from coach_stream.config import NetworkConfig
from coach_stream.envs import EnvShape
from coach_stream.policies.networks import GaussianActorCritic

SHAPE = EnvShape((17,), 6, action_shape=(6,), action_low=(-1.0,) * 6, action_high=(1.0,) * 6)


def test_the_gaussian_policy_starts_at_the_configured_log_std() -> None:
    net = GaussianActorCritic(SHAPE, NetworkConfig(hidden_sizes=(8,), log_std_init=-2.0))
    _, log_std = net.mean_and_log_std(torch.zeros(3, 17))
    assert torch.equal(log_std, torch.full((3, 6), -2.0))
    _, _, entropy, _ = net.get_action_and_value(torch.zeros(1, 17))
    assert math.isclose(
        float(entropy.detach()), 6 * (0.5 + 0.5 * math.log(2 * math.pi) - 2.0), rel_tol=1e-6
    )


def test_ortho_init_off_keeps_torch_default_init() -> None:
    torch.manual_seed(0)
    ortho = GaussianActorCritic(SHAPE, NetworkConfig(hidden_sizes=(8,)))
    torch.manual_seed(0)
    default = GaussianActorCritic(SHAPE, NetworkConfig(hidden_sizes=(8,), ortho_init=False))
    hidden = ortho.critic[0]
    assert isinstance(hidden, torch.nn.Linear)
    assert torch.count_nonzero(hidden.bias) == 0  # CleanRL's layer_init zeroes biases
    w = hidden.weight @ hidden.weight.T  # orthogonal rows scaled by sqrt(2)
    torch.testing.assert_close(w, 2.0 * torch.eye(8), atol=1e-5, rtol=0)
    plain = default.critic[0]
    assert isinstance(plain, torch.nn.Linear)
    assert torch.count_nonzero(plain.bias) == 8  # torch's uniform init
    bound = 1 / math.sqrt(17)
    assert float(plain.weight.detach().abs().max()) <= bound
