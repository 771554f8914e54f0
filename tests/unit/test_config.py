from __future__ import annotations

from pathlib import Path

import pytest

from coach_stream.config import builtin_presets, load_preset
from coach_stream.core import Mode
from coach_stream.errors import ConfigError


def test_builtin_presets_state_target_and_budget() -> None:
    assert set(builtin_presets()) >= {
        "cartpole-ppo",
        "cartpole-dqn",
        "acrobot-ppo",
        "lunarlander-ppo",
    }
    for name in builtin_presets():
        preset = load_preset(name)
        assert preset.name == name
        assert preset.env_step_budget > 0 and preset.eval_episodes == 20
    assert load_preset("cartpole-ppo").mode is Mode.SYNC
    assert load_preset("cartpole-dqn").mode is Mode.ASYNC
    assert load_preset("lunarlander-ppo").env_id == "LunarLander-v3"


def test_overrides_are_parsed_as_yaml() -> None:
    preset = load_preset("cartpole-ppo", ["ppo.learning_rate=0.01", "rollout.num_envs=4"])
    assert preset.ppo_config.learning_rate == 0.01
    assert preset.rollout.num_envs == 4


@pytest.mark.parametrize("override", ["ppo.lr=1", "rollout.envs=3", "colour=red"])
def test_unknown_key_is_an_error_naming_it(override: str) -> None:
    with pytest.raises(ConfigError, match=override.split("=")[0].replace(".", r"\.")):
        load_preset("cartpole-ppo", [override])


def test_unknown_key_in_a_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(
        Path(load_preset.__code__.co_filename)
        .parent.joinpath("presets", "cartpole-dqn.yaml")
        .read_text()
        + "\nbogus_key: 3\n"
    )
    with pytest.raises(ConfigError, match="bogus_key"):
        load_preset(str(path))


def test_invalid_values_and_names() -> None:
    with pytest.raises(ConfigError, match=r"ppo\.gamma"):
        load_preset("cartpole-ppo", ["ppo.gamma=2"])
    with pytest.raises(ConfigError, match="sync"):
        load_preset("cartpole-ppo", ["mode=async"])
    with pytest.raises(ConfigError, match="Unknown preset"):
        load_preset("no-such-preset")
    with pytest.raises(ConfigError, match="key=value"):
        load_preset("cartpole-ppo", ["ppo.gamma"])


def test_the_async_rate_limit_is_validated_against_mode_and_chunk() -> None:
    assert load_preset("cartpole-dqn").rollout.async_max_unread_steps == 2048
    with pytest.raises(ConfigError, match="ASYNC workers only"):
        load_preset("cartpole-ppo", ["rollout.async_max_unread_steps=4096"])
    with pytest.raises(ConfigError, match=r"below rollout\.chunk_steps \(32\).*at least 32"):
        load_preset("cartpole-dqn", ["rollout.async_max_unread_steps=31"])
    with pytest.raises(ConfigError, match=r"async_max_unread_steps"):
        load_preset("cartpole-dqn", ["rollout.async_max_unread_steps=0"])
    assert load_preset("cartpole-dqn", ["rollout.async_max_unread_steps=null"]).rollout
