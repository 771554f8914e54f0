"""CNN torsos: chosen by shape or preset, frames scaled once inside, channel order handled."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coach_stream.algorithms import builder_for
from coach_stream.config import NetworkConfig, load_preset
from coach_stream.envs import EnvShape
from coach_stream.errors import ConfigError
from coach_stream.policies.cnn import ImageEncoder, network_kind
from coach_stream.policies.networks import ActorCritic, QNetwork

PONG = EnvShape((4, 84, 84), 6, "uint8")
MINIGRID = EnvShape((7, 7, 3), 7, "uint8")


@pytest.mark.parametrize(
    ("shape", "kind"),
    [
        (PONG, "nature_cnn"),
        (EnvShape((84, 84, 4), 6, "uint8"), "nature_cnn"),
        (MINIGRID, "small_cnn"),
        (EnvShape((4,), 2), "mlp"),  # CartPole
        (EnvShape((7, 7, 3), 7, "float32"), "mlp"),  # not uint8: not taken for frames
        (EnvShape((84, 84), 6, "uint8"), "mlp"),  # 2-D: no channel axis
    ],
)
def test_auto_picks_the_torso_by_shape(shape: EnvShape, kind: str) -> None:
    assert network_kind(shape, NetworkConfig()) == kind


def test_explicit_kinds_that_cannot_fit_are_one_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"at least 36x36 pixels.*small_cnn"):
        network_kind(MINIGRID, NetworkConfig(kind="nature_cnn"))
    with pytest.raises(ConfigError, match=r"needs image observations \(3-D\)"):
        network_kind(EnvShape((4,), 2), NetworkConfig(kind="small_cnn"))
    assert network_kind(PONG, NetworkConfig(kind="mlp")) == "mlp"


def test_nature_cnn_is_the_papers_layers() -> None:
    net = ActorCritic(PONG, NetworkConfig())
    assert net.encoder is not None
    convs = [m for m in net.encoder.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (32, (8, 8), (4, 4)),
        (64, (4, 4), (2, 2)),
        (64, (3, 3), (1, 1)),
    ]
    assert net.encoder.features == 512
    # convs 8,224 + 32,832 + 36,928, fc 1,606,144, policy head 3,078, value head 513
    assert sum(p.numel() for p in net.parameters()) == 1_687_719


def test_frames_are_scaled_inside_the_network_whatever_dtype_arrives() -> None:
    torch.manual_seed(0)
    net = ActorCritic(MINIGRID, NetworkConfig(head_sizes=(64,)))
    frames = np.random.default_rng(0).integers(0, 256, (5, 7, 7, 3), dtype=np.uint8)
    from_uint8 = net.get_value(torch.from_numpy(frames))
    from_float = net.get_value(torch.from_numpy(frames.astype(np.float32)))
    torch.testing.assert_close(from_uint8, from_float)
    assert net.encoder is not None
    scaled = torch.from_numpy(frames).permute(0, 3, 1, 2).float() / 255.0
    torch.testing.assert_close(net.encoder(torch.from_numpy(frames)), net.encoder.net(scaled))


def test_minigrid_indices_are_not_scaled_as_pixels() -> None:
    """MiniGrid's view holds object/colour/state indices (at most about 10), not pixels."""
    minigrid, pong = load_preset("minigrid-ppo"), load_preset("pong-ppo")
    assert minigrid.network.pixels is False and pong.network.pixels is None
    forced = load_preset("minigrid-ppo", ["network.pixels=true"])
    assert forced.network.pixels is True
    torch.manual_seed(0)
    codes = ActorCritic(MINIGRID, minigrid.network)
    assert codes.encoder is not None and codes.encoder.scale == 1.0
    frames = np.random.default_rng(0).integers(0, 11, (5, 7, 7, 3), dtype=np.uint8)
    raw = torch.from_numpy(frames).permute(0, 3, 1, 2).float()
    torch.testing.assert_close(codes.encoder(torch.from_numpy(frames)), codes.encoder.net(raw))
    pixels = ActorCritic(PONG, pong.network)
    assert pixels.encoder is not None and pixels.encoder.scale == 1.0 / 255.0


def test_channel_last_frames_are_permuted_to_channel_first() -> None:
    torch.manual_seed(0)
    last = ImageEncoder(EnvShape((84, 84, 4), 6, "uint8"), "nature_cnn")
    first = ImageEncoder(EnvShape((4, 84, 84), 6, "uint8"), "nature_cnn")
    first.load_state_dict(last.state_dict())
    assert last.channels_last and not first.channels_last
    chw = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    torch.testing.assert_close(last(chw.permute(0, 2, 3, 1)), first(chw))


def test_q_network_over_frames_and_its_state_round_trips() -> None:
    q = QNetwork(PONG, NetworkConfig())
    frames = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    assert q(frames).shape == (2, 6)
    copy = QNetwork(PONG, NetworkConfig())
    copy.load_state_dict(q.state_dict())
    torch.testing.assert_close(copy(frames), q(frames))


def test_mlp_state_dict_keys_are_unchanged() -> None:
    """Policy versions written before CNNs existed still load into an MLP actor-critic."""
    keys = set(ActorCritic(EnvShape((4,), 2), NetworkConfig(hidden_sizes=(8,))).state_dict())
    layers = ("actor.0", "actor.2", "critic.0", "critic.2")
    assert keys == {f"{layer}.{p}" for layer in layers for p in ("weight", "bias")}


@pytest.mark.parametrize("name", ["minigrid-ppo", "pong-ppo"])
def test_actors_act_on_uint8_frames(name: str) -> None:
    preset = load_preset(name)
    shape = MINIGRID if name.startswith("minigrid") else PONG
    actor = builder_for(preset).make_actor(shape, greedy=False, seed=0)
    frames = np.random.default_rng(1).integers(0, 256, (3, *shape.obs_shape), dtype=np.uint8)
    action = actor.act(frames)
    assert action.actions.shape == (3,) and action.actions.dtype == np.int64
    assert action.log_probs is not None and np.isfinite(action.log_probs).all()
    greedy = builder_for(preset).make_actor(shape, greedy=True, seed=0)
    assert greedy.act(frames).actions.shape == (3,)


@pytest.mark.parametrize("algorithm", ["dqn", "impala"])
def test_the_other_discrete_builders_pick_a_cnn_for_frames(algorithm: str) -> None:
    preset = load_preset(
        "cartpole-dqn" if algorithm == "dqn" else "cartpole-impala", ["network.head_sizes=[16]"]
    )
    learner = builder_for(preset).make_learner(MINIGRID, 1, torch.Generator().manual_seed(0))
    state = learner.policy_state_dict()
    assert any(key.startswith("encoder.") for key in state)


def test_continuous_policies_refuse_frames_with_one_clear_error() -> None:
    shape = EnvShape((96, 96, 3), 3, "uint8", (3,), (-1.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    with pytest.raises(ConfigError, match="SAC's policy has no CNN torso"):
        builder_for(load_preset("pendulum-sac")).make_actor(shape, greedy=False, seed=0)
