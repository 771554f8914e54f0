"""Proof that the services the suite runs against are real: a real broker, a real GCS API."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from google.api_core.exceptions import PreconditionFailed
from google.cloud import storage

from coach_stream.stack import LocalStack

MESSAGES = 20_000
PARTITIONS = 3


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
    )
    futures[topic].result(timeout=30)


def _produce(bootstrap: str, topic: str) -> dict[int, list[tuple[bytes, bytes]]]:
    """20,000 keyed messages, idempotent and acks=all; returns what each partition acked."""
    acked: dict[int, list[tuple[bytes, bytes]]] = defaultdict(list)
    errors: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, message: object) -> None:
        if error is not None:
            errors.append(error)
            return
        acked[message.partition()].append((message.key(), message.value()))  # type: ignore[attr-defined]

    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
    )
    for i in range(MESSAGES):
        key = f"key-{i % 17}".encode()
        value = f"{i % 17}:{i}".encode()
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    return acked


GIVE_UP_S = 180.0


def _consume_all(bootstrap: str, topic: str, group: str, expected: int) -> list[object]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    messages: list[object] = []
    # A hang detector, not a latency bound: after a broker restart the group coordinator
    # loads its offsets and the group joins before the first record; a loaded 2-core
    # machine once took more than the 10 s per batch this used to allow.
    deadline = time.monotonic() + GIVE_UP_S
    try:
        while len(messages) < expected:
            assert time.monotonic() < deadline, (
                f"only {len(messages)} of {expected} messages came back within {GIVE_UP_S:g} s"
            )
            batch = consumer.consume(num_messages=5000, timeout=1)
            for message in batch:
                assert message.error() is None, message.error()
                messages.append(message)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return messages


def test_keyed_messages_round_trip_complete_and_in_order(kafka_bootstrap: str, unique_name: str):
    topic = f"services-order-{unique_name}"
    _create_topic(kafka_bootstrap, topic, PARTITIONS)
    acked = _produce(kafka_bootstrap, topic)
    assert sum(len(v) for v in acked.values()) == MESSAGES
    assert len(acked) == PARTITIONS  # 17 keys spread over every partition

    messages = _consume_all(kafka_bootstrap, topic, f"g-{unique_name}", MESSAGES)
    per_partition: dict[int, list[tuple[bytes, bytes]]] = defaultdict(list)
    for m in messages:
        per_partition[m.partition()].append((m.key(), m.value()))  # type: ignore[attr-defined]
    assert per_partition == acked  # complete, and in produce order within each partition

    per_key: dict[bytes, list[int]] = defaultdict(list)
    for m in messages:
        per_key[m.key()].append(int(m.value().split(b":")[1]))  # type: ignore[attr-defined]
    assert all(seq == sorted(seq) for seq in per_key.values())


def test_committed_offsets_are_read_back_by_a_new_consumer(kafka_bootstrap: str, unique_name: str):
    topic = f"services-offsets-{unique_name}"
    group = f"g-{unique_name}"
    _create_topic(kafka_bootstrap, topic, PARTITIONS)
    _produce(kafka_bootstrap, topic)
    _consume_all(kafka_bootstrap, topic, group, MESSAGES)

    fresh = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    try:
        committed = fresh.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10
        )
        watermarks = [fresh.get_watermark_offsets(tp, timeout=10)[1] for tp in committed]
    finally:
        fresh.close()
    assert [tp.offset for tp in committed] == watermarks
    assert sum(watermarks) == MESSAGES


def test_messages_survive_a_broker_restart(
    kafka_bootstrap: str, restart_kafka: Callable[[], None], unique_name: str
):
    topic = f"services-restart-{unique_name}"
    _create_topic(kafka_bootstrap, topic, PARTITIONS)
    acked = _produce(kafka_bootstrap, topic)

    restart_kafka()  # the stack's broker process, or the broker container (docker stop/start)

    messages = _consume_all(kafka_bootstrap, topic, f"g-{unique_name}", MESSAGES)
    assert sorted((m.key(), m.value()) for m in messages) == sorted(  # type: ignore[attr-defined]
        kv for values in acked.values() for kv in values
    )


def test_gcs_create_only_upload_list_and_download(gcs_client: storage.Client, unique_name: str):
    bucket = gcs_client.create_bucket(f"services-{unique_name}")
    payload = bytes(range(256)) * 4096  # 1 MiB: large enough for a multipart upload
    blob = bucket.blob("runs/r1/policies/00000001.pt")
    blob.upload_from_string(payload, if_generation_match=0)
    with pytest.raises(PreconditionFailed):
        bucket.blob("runs/r1/policies/00000001.pt").upload_from_string(
            b"other", if_generation_match=0
        )
    bucket.blob("runs/r1/trainer/00000001.pt").upload_from_string(b"state")
    bucket.blob("runs/r2/policies/00000001.pt").upload_from_string(b"x")

    names = [b.name for b in gcs_client.list_blobs(bucket, prefix="runs/r1/policies/")]
    assert names == ["runs/r1/policies/00000001.pt"]
    assert bucket.blob("runs/r1/policies/00000001.pt").download_as_bytes() == payload


def test_the_stack_emulator_has_the_default_bucket(
    gcs_endpoint: str, local_stack: LocalStack, gcs_client: storage.Client
):
    from coach_stream.stack.gcs import DEFAULT_BUCKET

    if local_stack.gcs_endpoint() != gcs_endpoint:
        pytest.skip("the GCS emulator in use is not the local stack's")
    assert gcs_client.bucket(DEFAULT_BUCKET).exists()
