"""What the end-to-end training tests share: how runs are supervised, and a peek at a run's
experience topic. The ``orchestrator`` fixture that uses ``SUPERVISION`` is in conftest."""

from __future__ import annotations

from coach_stream.codec import decode_chunk
from coach_stream.core import ExperienceChunk
from coach_stream.orchestrators import SupervisorConfig, warm_supervisor
from coach_stream.transport.settings import RunTopics

# As `coach-stream launch` runs them: tasks forked warm from the supervisor.
SUPERVISION = warm_supervisor(
    SupervisorConfig(initial_backoff_s=0.5, stop_grace_s=10.0, linger_s=10.0)
)


def first_chunk(kafka: str, run_id: str) -> ExperienceChunk:
    """The first record of the run's experience topic, decoded as the trainer does."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": kafka, "group.id": f"peek-{run_id}", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(RunTopics.for_run(run_id).experience, 0, 0)])
        message = consumer.poll(30.0)
        assert message is not None and message.error() is None
        value = message.value()
        assert value is not None
        return decode_chunk(value)
    finally:
        consumer.close()
