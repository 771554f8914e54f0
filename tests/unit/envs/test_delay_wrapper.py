"""The ``delay:<d>`` env wrapper: a fixed latency before each step, checked at the preset door."""

from __future__ import annotations

import numpy as np
import pytest

from coach_stream.config import load_preset
from coach_stream.envs import make_vector_env
from coach_stream.envs import wrappers as wrappers_module
from coach_stream.envs.wrappers import check_wrappers, parse_delay
from coach_stream.errors import ConfigError


@pytest.mark.parametrize(
    ("name", "seconds"),
    [("delay:2ms", 0.002), ("delay:500us", 0.0005), ("delay:0.25s", 0.25), ("delay:.5ms", 0.0005)],
)
def test_delay_parses_to_seconds(name: str, seconds: float) -> None:
    assert parse_delay(name) == pytest.approx(seconds)


def test_other_names_are_not_delays() -> None:
    assert parse_delay("atari") is None
    check_wrappers(["atari", "delay:2ms", "image"])  # all known: no error


@pytest.mark.parametrize("name", ["delay:2", "delay:ms", "delay:0ms", "delay:-1ms", "delay:11s"])
def test_a_malformed_delay_is_one_clear_error(name: str) -> None:
    with pytest.raises(ConfigError, match=r"delay:<number><us\|ms\|s>, e\.g\. delay:2ms"):
        parse_delay(name)


def test_the_preset_door_refuses_unknown_and_malformed_wrappers() -> None:
    preset = load_preset("cartpole-impala", ["env_wrappers=[delay:2ms]"])
    assert preset.env_wrappers == ("delay:2ms",)
    with pytest.raises(ConfigError, match=r"'env_wrappers'.*Unknown env wrapper.*delay:<d>"):
        load_preset("cartpole-impala", ["env_wrappers=[atary]"])
    with pytest.raises(ConfigError, match=r"'env_wrappers'.*'delay:2x' is not a delay"):
        load_preset("cartpole-impala", ["env_wrappers=[delay:2x]"])


def test_every_step_of_every_env_sleeps_the_delay_first(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(wrappers_module.time, "sleep", slept.append)
    envs = make_vector_env("CartPole-v1", 3, ["delay:2ms"])
    try:
        envs.reset(seed=[1, 2, 3])
        assert slept == []  # reset is not delayed, only steps
        for _ in range(4):
            obs, *_ = envs.step(np.zeros(3, dtype=np.int64))
        assert obs.shape == (3, 4)  # CartPole's own observations, unchanged
        assert slept == [pytest.approx(0.002)] * 12
    finally:
        envs.close()
