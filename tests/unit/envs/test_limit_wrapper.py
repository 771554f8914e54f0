"""The ``limit:<n>`` env wrapper: episodes truncated after n steps, checked at the preset door."""

from __future__ import annotations

import numpy as np
import pytest

from coach_stream.config import load_preset
from coach_stream.envs import make_vector_env
from coach_stream.envs.wrappers import parse_limit
from coach_stream.errors import ConfigError


def test_limit_parses_to_steps() -> None:
    assert parse_limit("limit:200") == 200
    assert parse_limit("limit:1") == 1
    assert parse_limit("delay:2ms") is None


@pytest.mark.parametrize("name", ["limit:", "limit:0", "limit:-3", "limit:2.5", "limit:ten"])
def test_a_malformed_limit_is_one_clear_error(name: str) -> None:
    with pytest.raises(ConfigError, match=r"limit:<steps>, e\.g\. limit:200"):
        parse_limit(name)


def test_the_preset_door_takes_a_limit_and_refuses_a_malformed_one() -> None:
    preset = load_preset("pong-ppo", ["env_wrappers=[atari,limit:64]"])
    assert preset.env_wrappers == ("atari", "limit:64")
    with pytest.raises(ConfigError, match=r"'env_wrappers'.*'limit:0' is not a step limit"):
        load_preset("cartpole-ppo", ["env_wrappers=[limit:0]"])


def test_every_episode_is_truncated_after_the_limit() -> None:
    envs = make_vector_env("CartPole-v1", 2, ["limit:5"])
    try:
        envs.reset(seed=[1, 2])
        truncations = []
        for step in range(10):
            # alternating pushes keep the pole up far longer than 5 steps
            _, _, terminated, truncated, _ = envs.step(np.full(2, step % 2, dtype=np.int64))
            assert not terminated.any()
            truncations.append(truncated.tolist())
        # SAME_STEP autoreset: the step that truncates also starts the next episode
        assert truncations[4] == [True, True] and truncations[9] == [True, True]
        assert sum(map(any, truncations)) == 2
    finally:
        envs.close()
