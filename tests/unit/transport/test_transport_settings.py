"""Settings -> librdkafka dictionaries, topic names, topic plans and the in-memory log."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from coach_stream.core import ExperienceChunk
from coach_stream.errors import ConfigError, EncodeError
from coach_stream.testing.memory_log import (
    MemoryExperienceReader,
    MemoryExperienceWriter,
    MemoryLog,
)
from coach_stream.transport import (
    KafkaExperienceReader,
    KafkaExperienceWriter,
    KafkaSettings,
    RunTopics,
    plan_run_topics,
)
from coach_stream.transport.environment import kafka_settings
from coach_stream.transport.names import TOPIC_PREFIX, consumer_group, is_run_topic, trainer_group


def test_producer_config_keeps_the_delivery_guarantees() -> None:
    config = KafkaSettings(
        bootstrap_servers="h:9092",
        compression="zstd",
        linger_ms=7,
        extra={"socket.keepalive.enable": "true"},
    ).producer_config()
    assert config["enable.idempotence"] is True
    assert config["acks"] == "all"
    assert config["partitioner"] == "consistent_random"  # transport.tail recomputes it
    assert config["compression.type"] == "zstd"
    assert config["linger.ms"] == 7
    assert config["socket.keepalive.enable"] == "true"


def test_consumer_config_turns_auto_commit_off() -> None:
    config = KafkaSettings(bootstrap_servers="h:9092").consumer_config("trainer-r1")
    assert config["group.id"] == "trainer-r1"
    assert config["enable.auto.commit"] is False
    assert config["auto.offset.reset"] == "earliest"
    assert int(config["max.partition.fetch.bytes"]) >= 16 * 1024 * 1024


@pytest.mark.parametrize("key", ["acks", "enable.idempotence", "enable.auto.commit", "partitioner"])
def test_extra_cannot_weaken_guarantees(key: str) -> None:
    with pytest.raises(ValidationError, match="fixed by coach_stream"):
        KafkaSettings(bootstrap_servers="h:9092", extra={key: "0"})


def test_settings_are_frozen_and_reject_unknown_fields() -> None:
    settings = KafkaSettings(bootstrap_servers="h:9092")
    with pytest.raises(ValidationError):
        settings.linger_ms = 3
    with pytest.raises(ValidationError):
        KafkaSettings(bootstrap_servers="h:9092", lingerms=3)  # type: ignore[call-arg]


def test_admin_config_only_takes_connection_extras() -> None:
    config = KafkaSettings(
        bootstrap_servers="h:9092",
        extra={"ssl.cipher.suites": "HIGH", "fetch.wait.max.ms": "9"},
    ).admin_config()
    assert config == {
        "bootstrap.servers": "h:9092",
        "client.id": "coach-stream",
        "reconnect.backoff.ms": 10,  # every client's (KafkaSettings._common)
        "ssl.cipher.suites": "HIGH",
    }


def test_run_topics() -> None:
    topics = RunTopics.for_run("cartpole-ppo_7")
    base = "coach-stream.cartpole-ppo_7"
    assert topics == RunTopics(
        f"{base}.experience", f"{base}.control", f"{base}.dead-letter", f"{base}.telemetry"
    )


def test_topic_prefix_is_fixed_and_group_ids_have_one_form() -> None:
    assert TOPIC_PREFIX == "coach-stream"
    with pytest.raises(ValidationError):
        KafkaSettings(bootstrap_servers="h:9092", topic_prefix="cs")  # type: ignore[call-arg]
    assert trainer_group("r1") == consumer_group("trainer", "r1") == "coach-stream.r1.trainer"
    assert consumer_group("replay.count") == "coach-stream.replay.count"
    one, two = consumer_group("x", private=True), consumer_group("x", private=True)
    assert one.startswith("coach-stream.x.") and one != two
    assert is_run_topic("coach-stream.r1.experience") and not is_run_topic("r1")


@pytest.mark.parametrize("run_id", ["", "a b", "a.b", "-x", "run/1", "ü", "x" * 240])
def test_bad_run_ids_are_config_errors(run_id: str) -> None:
    with pytest.raises(ConfigError, match="Run id"):
        RunTopics.for_run(run_id)


def test_topic_plan_is_explicit() -> None:
    settings = KafkaSettings(bootstrap_servers="h:9092")
    plans = {p.name: p for p in plan_run_topics(settings, RunTopics.for_run("r"), 6)}
    experience, control, dead, telemetry = plans.values()
    assert (experience.partitions, control.partitions, dead.partitions) == (6, 1, 1)
    assert telemetry.name == "coach-stream.r.telemetry" and telemetry.partitions == 1
    assert control.config["retention.ms"] == telemetry.config["retention.ms"] == "-1"
    assert int(experience.config["max.message.bytes"]) > settings.max_message_bytes
    with pytest.raises(ConfigError, match="at least 1"):
        plan_run_topics(settings, RunTopics.for_run("r"), 0)


def _librdkafka_threads() -> int:
    """librdkafka starts its threads (named ``rdk:...``) as soon as a client is created."""
    names = [path.read_text() for path in Path("/proc/self/task").glob("*/comm")]
    return sum(name.startswith("rdk:") for name in names)


def test_kafka_clients_do_no_io_in_constructors() -> None:
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    before = _librdkafka_threads()
    writer = KafkaExperienceWriter(settings, "t")
    reader = KafkaExperienceReader(settings, RunTopics.for_run("r"), "g")
    assert _librdkafka_threads() == before  # no librdkafka client yet, so nothing can connect
    writer.close()  # never opened: nothing to flush
    with writer:
        # Opening creates the client, so the check above is one that can fail.
        assert _librdkafka_threads() > before
    with pytest.raises(RuntimeError, match="outside `with`"):
        reader.read(1, 0)


def _chunk(seq: int) -> ExperienceChunk:
    return ExperienceChunk(
        "r",
        0,
        0,
        seq,
        0,
        0,
        np.zeros((2, 4), np.float32),
        np.zeros(1, np.int64),
        np.zeros(1, np.float32),
        np.zeros(1, bool),
        np.zeros(1, bool),
    )


def test_memory_log_mirrors_the_kafka_pair() -> None:
    log = MemoryLog(through_codec=True)
    with MemoryExperienceWriter(log) as writer, MemoryExperienceReader(log) as reader:
        for seq in range(5):
            writer.write(_chunk(seq))
        assert [c.chunk_seq for c in reader.read(3, 0)] == [0, 1, 2]
        saved = reader.positions()
        reader.commit()
        assert [c.chunk_seq for c in reader.read(10, 0)] == [3, 4]
        assert reader.at_end()
        reader.seek(saved)
        assert [c.chunk_seq for c in reader.read(10, 0)] == [3, 4]
    assert log.committed == {0: 3}
    bad = ExperienceChunk(**{**_chunk(9).__dict__, "rewards": np.zeros(1, np.float64)})
    with pytest.raises(EncodeError):
        MemoryExperienceWriter(log).write(bad)


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1:9092", "localhost", "a:1, b:2", "SSL://h:9093", "[::1]:9092", "[::1]"],
)
def test_addresses_librdkafka_takes_are_taken(address: str) -> None:
    assert kafka_settings(address, {}).bootstrap_servers == address


@pytest.mark.parametrize(
    ("address", "names"),
    [(":", "':' is not HOST:PORT"), ("h:", "'h:'"), ("h:0", "'h:0'"), ("h:70000", "'h:70000'"),
     (":9092", "':9092'"), ("h:x", "'h:x'"), ("a:1,,b:2", "('' is not)"),
     ("a:1,b", None), ("a:1,b:", "('b:' is not)")],
)  # fmt: skip
def test_a_malformed_address_is_one_sentence_before_any_client_waits(
    address: str, names: str | None
) -> None:
    if names is None:  # a host alone takes librdkafka's default port
        kafka_settings(address, {})
        return
    with pytest.raises(ConfigError, match=r"fix --kafka or KAFKA_BOOTSTRAP_SERVERS\.$") as caught:
        kafka_settings(address, {})
    assert names in str(caught.value)
