"""The builders: the registry covers every algorithm a preset can name, and each builder's
rules (a worker's share, the PPO quota, behaviour columns, replay refill) hold."""

from __future__ import annotations

from typing import get_args

import numpy as np
import pytest

from coach_stream.algorithms import BUILDERS, builder_for
from coach_stream.algorithms.ppo import PPOBuilder
from coach_stream.config import Preset, builtin_presets, load_preset, preset_from_mapping
from coach_stream.core import Mode
from coach_stream.envs import EnvShape
from coach_stream.errors import ConfigError


def test_every_algorithm_a_preset_can_name_has_a_builder() -> None:
    for name, builder in BUILDERS.items():  # the registry's key is its preset class's tag
        assert issubclass(builder.preset_type, Preset)
        assert get_args(builder.preset_type.model_fields["algorithm"].annotation) == (name,)
        assert name in builder.preset_type.model_fields  # its section, named after it
    for name in builtin_presets():
        preset = load_preset(name)
        assert type(preset) is BUILDERS[preset.algorithm].preset_type
        assert preset.mode is BUILDERS[preset.algorithm].mode  # the builder's, not config's


def test_mode_and_normalisation_come_from_the_builder() -> None:
    with pytest.raises(ConfigError, match="PPO runs only in mode 'sync'"):
        load_preset("cartpole-ppo", ["mode=async"])
    stated = load_preset("cartpole-ppo")
    data = {k: v for k, v in stated.model_dump().items() if k != "mode"}
    assert preset_from_mapping(data).mode is Mode.SYNC  # no mode: the builder's
    with pytest.raises(ConfigError, match="normalize is for the on-policy learners, not dqn"):
        load_preset("cartpole-dqn", ["normalize.rewards=true"])
    sac = load_preset("pendulum-sac")
    sac.check_normalizable((3,), "float32")  # no normalize section: nothing to refuse
    normalizing = sac.model_copy(
        update={"normalize": sac.normalize.model_copy(update={"observations": True})}
    )
    with pytest.raises(ConfigError, match="sac cannot"):
        normalizing.check_normalizable((3,), "float32")
    with pytest.raises(ConfigError, match="Unknown key 'dqn'"):
        load_preset("cartpole-ppo", ["dqn.batch_size=3"])  # another algorithm's section
    with pytest.raises(ConfigError, match=r"Invalid value for 'algorithm'.*'ppo'"):
        load_preset("cartpole-ppo", ["algorithm=a2c"])
    switch = ["algorithm=impala", "mode=async", "ppo=null", "impala.gamma=0.9"]  # bench/scale.py
    switched = load_preset("cartpole-ppo", switch)
    assert switched.mode is Mode.ASYNC and switched.discount == 0.9


def test_ppo_share_and_quota() -> None:
    preset = load_preset("cartpole-ppo", ["ppo.num_steps=16", "rollout.num_envs=4"])
    builder = PPOBuilder(preset)
    settings = builder.make_worker_settings("r", 3)
    assert (settings.run_id, settings.worker_id, settings.mode) == ("r", 3, Mode.SYNC)
    assert settings.share_steps == 16 and settings.behaviour
    assert builder.steps_per_update(workers=3) == 3 * 4 * 16
    assert builder.steps_per_update(workers=0) == 4 * 16  # never a zero quota
    explicit = PPOBuilder(load_preset("cartpole-ppo", ["ppo.steps_per_update=100"]))
    assert explicit.steps_per_update(workers=3) == 100
    assert not builder.make_trainer_settings("r").refill


def test_dqn_share_is_one_chunk_and_the_log_refills_replay() -> None:
    preset = load_preset("cartpole-dqn", ["rollout.chunk_steps=12"])
    builder = builder_for(preset)
    settings = builder.make_worker_settings("r", 0)
    assert settings.share_steps == 12 and not settings.behaviour
    assert settings.mode is Mode.ASYNC
    assert settings.max_lead_steps == preset.rollout.async_max_lead_steps
    assert settings.max_unread_steps == preset.rollout.async_max_unread_steps == 2048
    assert builder.make_trainer_settings("r").refill


@pytest.mark.parametrize("name", ["cartpole-ppo", "cartpole-dqn"])
def test_actor_writes_behaviour_columns_exactly_when_the_worker_keeps_them(name: str) -> None:
    builder = builder_for(load_preset(name))
    actor = builder.make_actor(EnvShape((4,), 2), greedy=False, seed=0)
    action = actor.act(np.zeros((3, 4), np.float32))
    keeps = builder.make_worker_settings("r", 0).behaviour
    assert (action.log_probs is not None) == keeps
    assert action.actions.shape == (3,)
