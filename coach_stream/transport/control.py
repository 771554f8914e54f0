"""The control topic on Kafka: policy versions, evaluations and the end of a run.

One partition, every message kept, so order is total and a late worker can rebuild the
whole history by reading from offset 0. The publisher waits for the broker's ack on every
message (there are few, and the announcer must know a version is durable before it moves
on). The subscriber assigns the partition manually and commits nothing: each process
reads the topic from the beginning on its own, so no consumer group coordination (and no
rebalance pause) sits on the path of a policy update.
"""

from __future__ import annotations

import logging
import time
from typing import Self

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from coach_stream.codec import decode_control, encode_control
from coach_stream.core import ClosingContext, ControlMessage
from coach_stream.errors import DecodeError, ServiceUnavailableError
from coach_stream.transport import clients
from coach_stream.transport.clients import FIRST_OFFSET
from coach_stream.transport.names import consumer_group
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.writer import KafkaRecordProducer

log = logging.getLogger(__name__)
_undecodable_log = clients.RateLimitedLog(log, prefix="")

_DRAIN_BATCH = 500
_CATCH_UP_SLICE_S = 0.2


class KafkaControlPublisher(ClosingContext):
    """``ControlPublisher``: appends one message and waits for ``acks=all``.

    Built on ``KafkaRecordProducer``, the experience writer's producer (delivery errors,
    bounded flush, close), with ``linger.ms=0``: few, latency-sensitive messages go out at
    once instead of waiting for a batch.
    """

    def __init__(self, settings: KafkaSettings, topics: RunTopics, timeout_s: float = 30.0) -> None:
        self._producer = KafkaRecordProducer(settings, topics.control, {"linger.ms": 0})
        self._timeout_s = timeout_s

    def __enter__(self) -> Self:
        """Create the client (no I/O yet): its producer id is acquired from now on."""
        self._producer.__enter__()
        return self

    def open(self) -> None:
        """Connect now (metadata and producer id) so the first announcement pays no setup."""
        self._producer.connect(self._timeout_s)

    def publish(self, message: ControlMessage) -> None:
        self._producer.produce(message.run_id.encode(), encode_control(message))
        self._producer.flush(self._timeout_s)

    def close(self) -> None:
        self._producer.close()


class KafkaControlSubscriber(ClosingContext):
    """``ControlSubscriber`` (plus ``read_to_end``): every control message, from offset 0."""

    def __init__(self, settings: KafkaSettings, topics: RunTopics, timeout_s: float = 10.0) -> None:
        self._settings = settings
        self._topic = topics.control
        self._timeout_s = timeout_s
        self._consumer: Consumer | None = None
        self._position = 0  # next offset to return
        self.undecodable = 0

    def _client(self) -> Consumer:
        if self._consumer is None:
            # A private group id: nothing is committed, the id only satisfies librdkafka.
            group = consumer_group("control-reader", private=True)
            consumer = clients.consumer(self._settings, group)
            consumer.assign([TopicPartition(self._topic, 0, FIRST_OFFSET)])
            self._consumer = consumer
        return self._consumer

    @property
    def position(self) -> int:
        """The offset of the next message this subscriber will return."""
        return self._position

    def poll(self, timeout: float) -> list[ControlMessage]:
        consumer = self._client()
        first = consumer.poll(max(timeout, 0.0))
        if first is None:
            return []
        batch = [first, *consumer.consume(num_messages=_DRAIN_BATCH, timeout=0)]
        return self._decode(batch)

    def end_offset(self) -> int:
        """The topic's current end: the offset the next published message will get.

        Retries while the broker is still electing the partition's leader (right after
        the topic was created) until the subscriber's timeout.
        """
        tp = TopicPartition(self._topic, 0)
        try:
            low, high = clients.watermarks(self._client(), tp, self._timeout_s)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise ServiceUnavailableError(
                    f"control topic {self._topic} does not exist; start the run with "
                    "`coach-stream launch` (it creates the topics) or check the run id."
                ) from exc
            raise ServiceUnavailableError(
                f"Kafka at {self._settings.bootstrap_servers} did not report the end of "
                f"{self._topic} ({error.str()}); check that the broker is up."
            ) from exc
        self._position = max(self._position, low)  # retention may have removed a head
        return int(high)

    def read_to_end(self, timeout: float) -> list[ControlMessage]:
        """Every message up to the end the topic had when called (at most ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        end = self.end_offset()
        # One poll even when already at the end: it starts the fetcher, so the first new
        # message is not delayed by the consumer's start-up.
        messages = self.poll(0.0)
        while self._position < end:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ServiceUnavailableError(
                    f"read only up to offset {self._position} of {end} on {self._topic} within "
                    f"{timeout:g} s; check the broker at {self._settings.bootstrap_servers}."
                )
            messages += self.poll(min(remaining, _CATCH_UP_SLICE_S))
        return messages

    def _decode(self, batch: list[Message]) -> list[ControlMessage]:
        decoded: list[ControlMessage] = []
        for message in batch:
            error = message.error()
            if error is not None:
                self._on_error(error)
                continue
            offset = message.offset()
            if offset is not None:
                self._position = max(self._position, offset + 1)
            try:
                decoded.append(decode_control(message.value() or b""))
            except DecodeError as exc:
                self.undecodable += 1
                _undecodable_log.emit(  # one line per 30 s, with how many were held back
                    logging.WARNING,
                    f"skipping undecodable control message {self._topic}@{offset}: {exc}",
                    key=f"undecodable {self._topic}",
                )
        return decoded

    def _on_error(self, error: KafkaError) -> None:
        if error.code() == KafkaError._PARTITION_EOF:
            return
        # UNKNOWN_TOPIC_OR_PART is only a warning here: a topic created a moment ago is
        # not in every broker's metadata yet; end_offset() reports a topic that stays absent.
        if error.fatal():
            raise ServiceUnavailableError(
                f"reading {self._topic} failed ({error.str()}); check the broker at "
                f"{self._settings.bootstrap_servers} and that the run's topics exist."
            )
        log.warning("transient consumer error on %s: %s", self._topic, error.str())

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
