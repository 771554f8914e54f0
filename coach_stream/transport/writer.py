"""The Kafka experience writer: a rollout worker's only output.

One record per chunk, keyed ``<worker_id>/<env_index>`` so each environment's chunks stay
in order on one partition. The producer is idempotent with ``acks=all``, so retries never
duplicate or reorder; ``linger.ms`` batching and compression give throughput. Delivery
failures are collected by the delivery callback and raised as ``DeliveryError`` on the
next ``write``/``flush``: never dropped. A full local queue (``BufferError``) is handled by
serving delivery reports until there is room again, which is the natural backpressure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from coach_stream.codec import encode_chunk
from coach_stream.core import ExperienceChunk
from coach_stream.errors import DeliveryError
from coach_stream.transport.settings import KafkaSettings

log = logging.getLogger(__name__)

Headers = list[tuple[str, str | bytes | None]]


@dataclass
class WriterStats:
    """Counters a worker can log: queued, acknowledged and failed records, payload bytes."""

    queued: int = 0
    delivered: int = 0
    failed: int = 0
    delivered_bytes: int = 0


class KafkaRecordProducer:
    """Raw keyed records to one topic with the delivery rules above (no codec)."""

    def __init__(self, settings: KafkaSettings, topic: str) -> None:
        self.settings = settings
        self.topic = topic
        self.stats = WriterStats()
        self._producer: Producer | None = None
        self._errors: list[str] = []

    def _client(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(self.settings.producer_config())
        return self._producer

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self.stats.delivered += 1
            self.stats.delivered_bytes += len(message.value() or b"")
        else:
            self.stats.failed += 1
            self._errors.append(error.str())

    def _raise_failures(self) -> None:
        if self._errors:
            errors, self._errors = self._errors, []
            raise DeliveryError(
                f"Kafka did not acknowledge {len(errors)} record(s) for topic {self.topic} "
                f"(first: {errors[0]}); check the broker at {self.settings.bootstrap_servers} "
                "and the topic, then restart the worker."
            )

    def produce(self, key: bytes | None, value: bytes, headers: Headers | None = None) -> None:
        """Queue one record; waits (serving delivery reports) while the local queue is full."""
        self._raise_failures()
        producer = self._client()
        while True:
            try:
                producer.produce(
                    self.topic, value, key, headers=headers, on_delivery=self._on_delivery
                )
                break
            except BufferError:
                producer.poll(0.05)
                self._raise_failures()
            except KafkaException as exc:  # refused locally, e.g. larger than message.max.bytes
                self.stats.failed += 1
                raise DeliveryError(
                    f"Kafka refused a {len(value)}-byte record for topic {self.topic} "
                    f"({exc.args[0].str()}); raise KafkaSettings.max_message_bytes or write "
                    "smaller chunks."
                ) from exc
        self.stats.queued += 1
        producer.poll(0)

    def flush(self, timeout: float | None = None) -> None:
        """Block until every queued record is acknowledged; raise DeliveryError otherwise."""
        if self._producer is not None:
            left = self._producer.flush(-1 if timeout is None else timeout)
            if left:
                raise DeliveryError(
                    f"{left} record(s) for topic {self.topic} were not acknowledged within "
                    f"{timeout}s; check that the broker at {self.settings.bootstrap_servers} "
                    "is up."
                )
        self._raise_failures()

    def close(self) -> None:
        """Flush (bounded by the delivery timeout) and release the client."""
        if self._producer is None:
            return
        try:
            self.flush(self.settings.delivery_timeout_ms / 1000 + 5)
        finally:
            self._producer = None

    def __enter__(self) -> Self:
        self._client()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
            return
        try:  # already failing: do not mask the original error with a delivery error
            self.close()
        except DeliveryError as delivery:
            log.error("while handling %r: %s", exc, delivery)


class KafkaExperienceWriter(KafkaRecordProducer):
    """``core.ExperienceWriter`` over Kafka: encode, key by env, produce."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        *,
        encode: Callable[[ExperienceChunk], bytes] = encode_chunk,
    ) -> None:
        super().__init__(settings, topic)
        self._encode = encode

    def write(self, chunk: ExperienceChunk) -> None:
        self.produce(chunk.key.encode(), self._encode(chunk))
