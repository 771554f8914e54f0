"""Broker failure on a three-broker cluster: no acknowledged record is lost.

Three Kafka containers from the tests' image (``COACH_STREAM_KAFKA_IMAGE``), each broker and
controller, on host networking; the topic has three replicas and ``min.insync.replicas=2``.
A writer with the project's producer (idempotent, ``acks=all``) keeps producing while the
partition leader's container is killed with SIGKILL; afterwards every record the producer
was told is stored must be read back from the two survivors.

Needs a Docker engine: skipped without one, except that a session that chose
``COACH_STREAM_KAFKA=testcontainers`` with ``COACH_STREAM_REQUIRE_SERVICES=1`` (CI) fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator

import docker
import pytest
from confluent_kafka import KafkaError, Message, TopicPartition
from confluent_kafka.cimpl import NewTopic

from coach_stream.testing import kafka_container
from coach_stream.testing.waiting import wait_until
from coach_stream.transport import clients
from coach_stream.transport.settings import KafkaSettings

pytestmark = pytest.mark.integration

RECORDS = 3000


@pytest.fixture(scope="module")
def image() -> str:
    """The tests' Kafka image, on an engine that answers; else skip (or fail in CI)."""
    image = kafka_container.env_image()
    why = kafka_container.docker_answers() or kafka_container.ensure_image(image)
    if why is not None:
        required = os.environ.get("COACH_STREAM_REQUIRE_SERVICES") == "1"
        chosen = os.environ.get("COACH_STREAM_KAFKA") == "testcontainers"
        if required and chosen:
            pytest.fail(f"three-broker Kafka is not available: {why}", pytrace=False)
        pytest.skip(f"three-broker Kafka needs a Docker engine and the image: {why}")
    return image


@pytest.fixture(scope="module")
def cluster(image: str) -> Iterator[kafka_container.KafkaCluster]:
    kafka_container.configure_reaper()
    kafka_container.remove_orphans()
    with kafka_container.KafkaCluster(image, size=3, min_insync_replicas=2) as started:
        yield started


_ABANDONED = """
import sys, time
from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer
from coach_stream.testing import kafka_container as kc

testcontainers_config.ryuk_disabled = True  # the path under test: no reaper
container = DockerContainer(sys.argv[1]).with_kwargs(
    network_mode="host",
    entrypoint=["sleep", "600"],
    labels={kc.LABEL: "kafka", kc.OWNER_LABEL: kc._owner()},
)
container.start()
print(container.get_wrapped_container().id, flush=True)
time.sleep(600)
"""


def test_containers_of_a_killed_session_are_removed_by_the_next(image: str) -> None:
    """Without a reaper, a session killed with SIGKILL leaves its container; the next removes it."""
    session = subprocess.Popen(
        [sys.executable, "-c", _ABANDONED, image], stdout=subprocess.PIPE, text=True
    )
    try:
        assert session.stdout is not None
        container_id = session.stdout.readline().strip()
        assert container_id, "the abandoned session started no container"
    finally:
        session.kill()  # SIGKILL: no finalizer, no atexit hook runs
        session.wait(timeout=30)
    client = docker.from_env()
    try:
        assert client.containers.get(container_id).status == "running"
        assert container_id in kafka_container.remove_orphans()
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(container_id)
    finally:
        client.close()


def _leader(settings: KafkaSettings, topic: str) -> int:
    """The partition's leader; -1 while the broker asked has not learned of the topic yet."""
    with clients.admin(settings) as admin:
        metadata = admin.list_topics(topic, timeout=10)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or 0 not in found.partitions:
        return -1
    partition = found.partitions[0]
    assert sorted(partition.replicas) == [1, 2, 3]
    return int(partition.leader)


def test_killing_a_broker_loses_no_acknowledged_record(
    cluster: kafka_container.KafkaCluster,
) -> None:
    settings = KafkaSettings(bootstrap_servers=cluster.bootstrap_servers)
    topic = f"cluster-{uuid.uuid4().hex[:12]}"
    with clients.admin(settings) as admin:
        futures = admin.create_topics(
            [NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})], operation_timeout=30
        )
        futures[topic].result(timeout=30)
    wait_until(lambda: _leader(settings, topic) > 0, timeout=30, what="a partition leader")
    victim = _leader(settings, topic)  # node ids are 1-based, container indexes 0-based

    acked: list[int] = []
    failed: list[str] = []
    killed_at: list[int] = []
    lock = threading.Lock()

    def delivered(error: KafkaError | None, message: Message) -> None:
        with lock:
            if error is not None:
                failed.append(str(error))
            else:
                acked.append(int(message.value() or b"-1"))

    producer = clients.producer(settings.model_copy(update={"linger_ms": 5}))
    try:
        for i in range(RECORDS):
            producer.produce(
                topic, key=str(i).encode(), value=str(i).encode(), on_delivery=delivered
            )
            producer.poll(0)
            if i == RECORDS // 3:
                # Kill the leader only once writes are flowing and some are acknowledged.
                producer.flush(30)
                assert acked, "nothing acknowledged before the kill"
                cluster.kill(victim - 1)
                killed_at.append(len(acked))
        assert producer.flush(120) == 0, "records still in flight after 120 s"
    finally:
        producer.flush(5)

    assert killed_at and len(acked) > killed_at[0], "no record was acknowledged after the kill"
    assert _leader(settings, topic) != victim
    with clients.admin(settings) as admin:
        brokers = admin.list_topics(timeout=10).brokers
    assert victim not in brokers, "the killed broker still answers"

    consumer = clients.consumer(settings, f"cluster-check-{uuid.uuid4().hex[:8]}")
    read: set[int] = set()
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)

        def caught_up() -> bool:
            for message in consumer.consume(500, timeout=0.5):
                if message.error() is None:
                    read.add(int(message.value() or b"-1"))
            position = consumer.position([TopicPartition(topic, 0)])[0].offset
            return position >= high

        wait_until(caught_up, timeout=60, what="reading the topic to its end")
    finally:
        consumer.close()

    missing = sorted(set(acked) - read)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:10]}"
    # Every record was acknowledged: two in-sync replicas remained, so acks=all could be met.
    assert not failed, f"deliveries failed: {failed[:3]}"
    assert len(set(acked)) == RECORDS
