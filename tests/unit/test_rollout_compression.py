"""The preset's experience compression reaches the rollout worker's producer."""

from __future__ import annotations

import pytest

from coach_stream.cli.rollout import experience_producer_settings
from coach_stream.config import load_preset
from coach_stream.transport.settings import KafkaSettings


@pytest.mark.parametrize(
    ("preset", "codec"), [("minigrid-ppo", "zstd"), ("pong-ppo", "zstd"), ("cartpole-ppo", "none")]
)
def test_the_presets_compression_is_the_producers(preset: str, codec: str) -> None:
    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:9092")
    settings = experience_producer_settings(kafka, load_preset(preset))
    assert settings.producer_config()["compression.type"] == codec
    assert kafka.producer_config()["compression.type"] == "none"  # the run's own: unchanged


def test_an_override_reaches_the_producer() -> None:
    preset = load_preset("cartpole-ppo", ["rollout.compression=lz4"])
    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:9092")
    assert (
        experience_producer_settings(kafka, preset).producer_config()["compression.type"] == "lz4"
    )
