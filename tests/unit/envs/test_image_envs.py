"""Image envs: the preset's wrappers, and uint8 frames from the env through the wire codec."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from coach_stream.algorithms import builder_for, chunk_spec
from coach_stream.codec import decode_chunk, encode_chunk
from coach_stream.config import load_preset
from coach_stream.core import Action
from coach_stream.envs import SeedRole, env_seeds, env_shape, make_vector_env, probe_shape
from coach_stream.errors import ConfigError, InvalidChunkError
from coach_stream.rollout.chunker import Chunker
from coach_stream.testing.chunks import make_chunk
from coach_stream.trainer.dqn import DQN
from coach_stream.trainer.replay import ReplayBuffer


def test_atari_wrapper_gives_four_stacked_84x84_uint8_frames() -> None:
    envs = make_vector_env("ALE/Pong-v5", 2, ["atari"])
    try:
        shape = env_shape(envs)
        assert (shape.obs_shape, shape.obs_dtype, shape.num_actions) == ((4, 84, 84), "uint8", 6)
        obs, _ = envs.reset(seed=[1, 2])
        assert obs.dtype == np.uint8 and obs.shape == (2, 4, 84, 84)
        obs, rewards, *_ = envs.step(np.zeros(2, dtype=np.int64))
        assert obs.dtype == np.uint8 and set(np.unique(rewards)) <= {-1.0, 0.0, 1.0}
        # the frame skip happens once, in AtariPreprocessing (the base env skips none)
        assert envs.envs[0].unwrapped._frameskip == 1  # type: ignore[attr-defined]
    finally:
        envs.close()


def test_image_wrapper_keeps_minigrids_agent_view_alone() -> None:
    shape = probe_shape("MiniGrid-Empty-5x5-v0", ["image"])
    assert (shape.obs_shape, shape.obs_dtype, shape.num_actions) == ((7, 7, 3), "uint8", 7)


def test_wrapper_mistakes_are_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="Unknown env wrapper"):
        make_vector_env("CartPole-v1", 1, ["atary"])
    with pytest.raises(ConfigError, match="remove 'image' from env_wrappers"):
        make_vector_env("CartPole-v1", 1, ["image"])
    with pytest.raises(ConfigError, match=r"env_wrappers \[image\]"):
        probe_shape("MiniGrid-Empty-5x5-v0")  # its Dict observation, unwrapped


def test_frames_travel_as_uint8_bytes_from_env_to_replay() -> None:
    """Chunker, codec, trainer's door and replay buffer all keep the env's uint8 frames."""
    preset = load_preset("minigrid-ppo")
    envs = make_vector_env(preset.env_id, 2, preset.env_wrappers)
    shape = env_shape(envs)
    chunker = Chunker("r", 0, 2, 8, shape.obs_shape, np.dtype(shape.obs_dtype), behaviour=True)
    obs, _ = envs.reset(seed=env_seeds(1, 0, 2, SeedRole.ROLLOUT))  # type: ignore[arg-type]
    chunker.start(obs, version=0)
    chunks = []
    for _ in range(8):
        actions = np.array([2, 1], dtype=np.int64)
        obs, rewards, term, trunc, infos = envs.step(actions)
        action = Action(actions, np.zeros(2, np.float32))
        chunks += chunker.add(action, rewards, term, trunc, obs, infos)
    envs.close()
    assert chunks
    spec = chunk_spec(preset, "r", shape)
    buffer = ReplayBuffer(64, shape.obs_shape, obs_dtype=shape.obs_dtype)
    for chunk in chunks:
        assert chunk.observations.dtype == np.uint8
        data = encode_chunk(chunk)
        # one byte per pixel on the wire: the frames are most of the record, and float32
        # would be four times their size
        frame_bytes = chunk.observations.size
        assert frame_bytes < len(data) < frame_bytes + 400
        back = decode_chunk(data)
        assert back.observations.dtype == np.uint8
        assert np.array_equal(back.observations, chunk.observations)
        spec.check(back)  # the trainer's door takes it
        buffer.add_chunk(back)
    assert buffer._obs.dtype == np.uint8  # replay holds frames at a byte a pixel too
    float_chunk = replace(chunks[0], observations=chunks[0].observations.astype(np.float32))
    with pytest.raises(InvalidChunkError, match="observations are float32"):
        spec.check(float_chunk)


def test_dqn_learns_from_uint8_frames_sampled_as_uint8() -> None:
    preset = load_preset(
        "cartpole-dqn", ["dqn.learning_starts=0", "dqn.batch_size=4", "network.head_sizes=[8]"]
    )
    shape = probe_shape("MiniGrid-Empty-5x5-v0", ["image"])
    learner = builder_for(preset).make_learner(shape, 1, torch.Generator().manual_seed(0))
    assert isinstance(learner, DQN)
    learner.ingest([make_chunk(6, (7, 7, 3), obs_dtype="uint8", behaviour=False)], 0)
    sample = learner.buffer.sample(4, torch.Generator().manual_seed(0))
    assert sample.observations.dtype == torch.uint8
    metrics, _ = learner.learn(env_steps=6)
    assert metrics["gradient_steps"] >= 1 and np.isfinite(metrics["loss"])
