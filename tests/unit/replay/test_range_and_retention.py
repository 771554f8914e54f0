"""--from/--to and experience retention parse to exact values, or fail with one clear line."""

from __future__ import annotations

import pytest

from coach_stream.config import load_preset
from coach_stream.errors import ConfigError
from coach_stream.replay.range import EARLIEST, LATEST, parse_bound
from coach_stream.transport.admin import plan_run_topics
from coach_stream.transport.retention import parse_retention
from coach_stream.transport.settings import KafkaSettings, RunTopics


def test_bounds() -> None:
    assert parse_bound(None, "--from") is EARLIEST and parse_bound(None, "--to") is LATEST
    assert parse_bound("1200").offset == 1200
    assert parse_bound("0:5,3:7").offsets == {0: 5, 3: 7}
    assert parse_bound("@1764698400000").timestamp_ms == 1_764_698_400_000
    assert parse_bound("2025-12-02T18:00:00Z").timestamp_ms == 1_764_698_400_000
    assert parse_bound("2025-12-02T19:00:00+01:00").timestamp_ms == 1_764_698_400_000


@pytest.mark.parametrize("text", ["yesterday", "-5", "1:2:3", "@x", "2025-12-02T18:00:00"])
def test_bad_bounds(text: str) -> None:
    with pytest.raises(ConfigError, match="--from") as error:
        parse_bound(text, "--from")
    assert "\n" not in str(error.value)


def test_retention_forms() -> None:
    assert parse_retention("forever").forever
    assert parse_retention("7d").ms == 7 * 86_400_000
    assert parse_retention("90m").ms == 5_400_000
    assert parse_retention("50GiB").bytes == 50 * 2**30
    both = parse_retention("30d,100GB")
    assert (both.ms, both.bytes) == (30 * 86_400_000, 100 * 10**9)
    assert str(both) == "30d, 100GB per partition"
    assert str(parse_retention("1.5GiB")) == "1536MiB per partition"


@pytest.mark.parametrize("text", ["7x", "0d", "7d,8d", "lots"])
def test_bad_retention(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_retention(text)


def test_retention_reaches_the_topic_plan_and_the_preset() -> None:
    preset = load_preset("cartpole-dqn", ["experience_retention=30d,100GiB"])
    retention = parse_retention(preset.experience_retention)
    plans = plan_run_topics(
        KafkaSettings(bootstrap_servers="x:1"),
        RunTopics.for_run("r1"),
        2,
        retention.ms,
        retention.bytes,
    )
    experience = plans[0].config
    assert experience["retention.ms"] == str(30 * 86_400_000)
    assert experience["retention.bytes"] == str(100 * 2**30)
    assert plans[1].config["retention.ms"] == "-1"  # control keeps every version forever
    assert load_preset("cartpole-dqn").experience_retention == "forever"
    with pytest.raises(ConfigError, match="experience_retention"):
        load_preset("cartpole-dqn", ["experience_retention=soon"])
