"""``play --video`` works for every kind of preset: classic control, Box2D, MiniGrid,
MuJoCo (headless, through EGL) and Atari each give rgb_array frames and act greedily."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coach_stream.algorithms import builder_for
from coach_stream.config import load_preset
from coach_stream.core import LoadedPolicy, PolicyVersion
from coach_stream.envs import probe_shape
from coach_stream.rollout.play import play

KINDS = ["cartpole-ppo", "lunarlander-ppo", "minigrid-ppo", "halfcheetah-sac", "pong-ppo"]


@pytest.mark.parametrize("preset_name", KINDS)
def test_one_greedy_episode_renders_frames(preset_name: str) -> None:
    """(tests/conftest.py sets MUJOCO_GL=egl without a display, as `play` does.)"""
    preset = load_preset(preset_name)
    shape = probe_shape(preset.env_id, preset.env_wrappers)
    builder = builder_for(preset)
    learner = builder.make_learner(shape, 1, torch.Generator().manual_seed(0))
    actor = builder.make_actor(shape, greedy=True, seed=0)
    record = PolicyVersion("r", 0, "mem://0", "0" * 64, 1, 0, 0, 0)
    actor.load(LoadedPolicy(record, dict(learner.policy_state_dict())))
    frames: list[np.ndarray] = []

    class EnoughError(Exception):
        pass

    def sink(frame: np.ndarray) -> None:
        frames.append(frame)
        if len(frames) == 5:  # a few steps show the whole path; an episode can be long
            raise EnoughError

    with pytest.raises(EnoughError):
        play(actor, preset.env_id, tuple(preset.env_wrappers), 1, 0, sink)
    assert all(f.ndim == 3 and f.shape[2] == 3 and f.dtype == np.uint8 for f in frames)
